// Opens a cell's story below the grid. With an operator token, the story's
// buttons open a confirm step (reason, who, token), post the action, then
// follow the partition: its story is read again every second, the verdict
// shown and the cell recoloured, until a newer attempt than the one before
// the action reaches a final verdict. Fragments are rendered and escaped
// by the server; nothing typed or read from the page is inserted as HTML.
(function () {
  'use strict';
  var grid = document.getElementById('grid');
  var detail = document.getElementById('detail');
  var story = document.getElementById('story');
  var progress = document.getElementById('progress');
  var keysEl = document.getElementById('keys');
  if (!grid || !detail || !story || !progress || !keysEl) return;
  var keys = JSON.parse(keysEl.textContent) || [];
  var pollEvery = 1000, followFor = 5 * 60 * 1000;
  // generation of the partition followed: a click on a cell stops a follow.
  var generation = 0;
  // who and the token, for the next confirm step; kept in this page only.
  var typed = { who: '', token: '' };

  function load(ds, key) {
    var url = '/partition?dataset=' + encodeURIComponent(ds) + '&partition=' + encodeURIComponent(key);
    return fetch(url, { credentials: 'same-origin', cache: 'no-store' }).then(function (r) {
      return r.text().then(function (text) {
        if (!r.ok) throw new Error(r.status + ': ' + text.trim());
        return text;
      });
    });
  }

  function show(html) {
    story.innerHTML = html;
    detail.hidden = false;
    wire();
    return story.querySelector('#partition');
  }

  function say(text, state) {
    progress.textContent = text;
    progress.setAttribute('data-state', state || '');
    progress.hidden = false;
  }

  // cell is the grid's cell of a partition, when the grid shows it.
  function cell(ds, key) {
    var i = keys.indexOf(key);
    if (i < 0) return null;
    var rows = grid.querySelectorAll('tbody tr');
    for (var r = 0; r < rows.length; r++) {
      if (rows[r].getAttribute('data-d') === ds) return rows[r].querySelectorAll('td')[i] || null;
    }
    return null;
  }

  grid.addEventListener('click', function (ev) {
    var td = ev.target.closest('td');
    if (!td || !grid.contains(td)) return;
    var ds = td.parentElement.getAttribute('data-d');
    var key = keys[Number(td.getAttribute('data-i'))];
    generation++;
    progress.hidden = true;
    load(ds, key).then(function (html) {
      show(html);
      detail.scrollIntoView({ block: 'nearest' });
    }, function (err) { detail.hidden = false; say(err.message, 'error'); });
  });

  function wire() {
    var close = story.querySelector('#close');
    if (close) close.addEventListener('click', function () { detail.hidden = true; });
    var forms = story.querySelectorAll('form.confirm');
    story.querySelectorAll('button.act').forEach(function (b) {
      b.addEventListener('click', function () {
        forms.forEach(function (f) {
          f.hidden = f.id !== b.getAttribute('data-confirm');
          if (f.hidden) return;
          if (!f.elements.who.value) f.elements.who.value = typed.who;
          if (!f.elements.token.value) f.elements.token.value = typed.token;
          f.elements.reason.focus();
        });
      });
    });
    forms.forEach(function (f) {
      f.querySelector('button.cancel').addEventListener('click', function () { f.hidden = true; });
      f.addEventListener('submit', function (ev) {
        ev.preventDefault();
        act(f);
      });
    });
  }

  // act posts a confirmed action and, once it is done, follows the
  // partition.
  function act(f) {
    var part = story.querySelector('#partition');
    var ds = part.getAttribute('data-dataset'), key = part.getAttribute('data-partition');
    var before = Number(part.getAttribute('data-latest'));
    var go = f.querySelector('button.go');
    typed.who = f.elements.who.value;
    typed.token = f.elements.token.value;
    go.disabled = true;
    say('asking: ' + go.textContent.replace(/^Confirm /, '') + ' of ' + ds + ' ' + key + '…', 'asking');
    fetch(f.action, {
      method: 'POST', credentials: 'same-origin', headers: { Accept: 'application/json' },
      body: new URLSearchParams(new FormData(f))
    }).then(function (r) {
      return r.text().then(function (text) {
        var out = null;
        try { out = JSON.parse(text); } catch (e) { /* a refusal is text */ }
        if (!out) {
          go.disabled = false;
          say('refused (' + r.status + '): ' + text.trim(), 'error');
          return;
        }
        if (!out.ok) {
          go.disabled = false;
          say(out.action + ': ' + out.outcome, 'error');
          return;
        }
        f.hidden = true;
        follow(ds, key, before, out.action + ': ' + out.outcome);
      });
    }, function (err) {
      go.disabled = false;
      say('not sent: ' + err.message, 'error');
    });
  }

  function follow(ds, key, before, what) {
    var gen = ++generation, until = Date.now() + followFor, last = '';
    say(what + ' · waiting for the result', 'waiting');
    function tick() {
      if (gen !== generation) return;
      load(ds, key).then(function (html) {
        if (gen !== generation) return;
        var part = html === last ? story.querySelector('#partition') : show(html);
        last = html;
        var td = cell(ds, key);
        if (td) td.className = part.getAttribute('data-status');
        var state = part.getAttribute('data-state');
        var line = story.querySelector('#verdict .line').textContent;
        if (part.getAttribute('data-final') === 'true' && Number(part.getAttribute('data-latest')) > before) {
          say(what + ' · ' + state + ': ' + line, state);
          progress.setAttribute('data-done', 'true');
          return;
        }
        again(what + ' · now ' + state + ': ' + line);
      }, function (err) {
        if (gen === generation) again(what + ' · ' + err.message + '; reading again');
      });
    }
    function again(text) {
      if (Date.now() > until) {
        say(text + ' · no final verdict after ' + followFor / 60000 + ' minutes; click the cell to look again', 'stopped');
        return;
      }
      say(text, 'waiting');
      setTimeout(tick, pollEvery);
    }
    progress.removeAttribute('data-done');
    setTimeout(tick, pollEvery);
  }
})();
