// The HTML report's one script: sorts the task table by a clicked heading
// (numbers as numbers) and filters its rows as you type.
(function(){
var table=document.getElementById('task-table');var body=table.tBodies[0];
var heads=table.tHead.rows[0].cells;
function sortBy(i){var th=heads[i];var up=th.getAttribute('aria-sort')!=='ascending';
for(var h=0;h<heads.length;h++){heads[h].removeAttribute('aria-sort');}
th.setAttribute('aria-sort',up?'ascending':'descending');
var num=th.getAttribute('data-type')==='num';var rows=Array.prototype.slice.call(body.rows);
rows.sort(function(a,b){var x=a.cells[i].textContent,y=b.cells[i].textContent;
var d=num?(Number(x)-Number(y)):x.localeCompare(y,undefined,{numeric:true});
return up?d:-d;});
var frag=document.createDocumentFragment();rows.forEach(function(r){frag.appendChild(r);});
body.appendChild(frag);}
Array.prototype.forEach.call(heads,function(th,i){
th.addEventListener('click',function(){sortBy(i);});
th.addEventListener('keydown',function(e){if(e.key==='Enter'){sortBy(i);}});});
var filter=document.getElementById('filter');
filter.addEventListener('input',function(){var q=filter.value.toLowerCase();
Array.prototype.forEach.call(body.rows,function(r){
r.style.display=r.textContent.toLowerCase().indexOf(q)<0?'none':'';});});
})();
