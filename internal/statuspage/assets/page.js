// Opens a cell's attempts below the grid. The fragment is rendered and
// escaped by the server; nothing from the page is inserted as HTML.
(function () {
  var grid = document.getElementById('grid');
  var detail = document.getElementById('detail');
  var keysEl = document.getElementById('keys');
  if (!grid || !detail || !keysEl) return;
  var keys = JSON.parse(keysEl.textContent) || [];
  grid.addEventListener('click', function (ev) {
    var td = ev.target.closest('td');
    if (!td || !grid.contains(td)) return;
    var ds = td.parentElement.getAttribute('data-d');
    var key = keys[Number(td.getAttribute('data-i'))];
    var url = '/partition?dataset=' + encodeURIComponent(ds) + '&partition=' + encodeURIComponent(key);
    fetch(url, { credentials: 'same-origin' }).then(function (r) { return r.text(); }).then(function (html) {
      detail.innerHTML = html;
      detail.hidden = false;
      var close = document.getElementById('close');
      if (close) close.addEventListener('click', function () { detail.hidden = true; });
      detail.scrollIntoView({ block: 'nearest' });
    });
  });
})();
