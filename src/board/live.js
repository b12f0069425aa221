// git swarm board --serve: the live page's script (served as /app.js; the page allows no other script).
// Each new state of the board comes as server-sent events from /events (or from /frame, polled, when those cannot
// be had) and its sections are put in place without a reload. The sections are HTML the server escaped; this
// script builds no markup from the board's strings: a task's title and hand-off note are set as text.
'use strict';
(function () {
  const shown = {}; // section id -> the HTML put in place
  let seq = Number(document.body.dataset.seq);
  let skew = 0; // the server's clock minus the browser's, in ms
  let source = null;
  let polling = null;

  const $ = (id) => document.getElementById(id);
  const now = () => Date.now() + skew;

  function setConn(state, text) {
    const c = $('conn');
    c.dataset.state = state;
    c.textContent = text;
  }

  function apply(frame) {
    if (!frame || typeof frame.seq !== 'number' || frame.seq === seq) return;
    seq = frame.seq;
    document.body.dataset.seq = String(seq);
    const t = Date.parse(frame.now);
    if (!isNaN(t)) skew = t - Date.now();
    for (const id of Object.keys(frame.sections || {})) {
      const html = frame.sections[id];
      if (shown[id] === html) continue;
      const el = $('s-' + id);
      if (!el) continue;
      el.innerHTML = html; // escaped by the server (src/board/live.rs, html.rs)
      shown[id] = html;
    }
    $('commit').textContent = String(frame.commit || '').slice(0, 12);
    const u = $('updated').querySelector('time');
    if (u) u.setAttribute('datetime', frame.now);
    const err = $('error');
    err.hidden = !frame.error;
    err.textContent = frame.error ? 'cannot read the board now (showing the last state): ' + frame.error : '';
    tick();
  }

  function span(ms) {
    const s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return s + ' s';
    const m = Math.round(s / 60);
    if (m < 60) return m + ' min';
    const h = s / 3600;
    if (h < 48) return (Math.round(h * 10) / 10) + ' h';
    return Math.round(s / 86400) + ' d';
  }

  function relative(el) {
    const t = Date.parse(el.getAttribute('datetime'));
    if (isNaN(t)) return;
    const d = t - now();
    const kind = el.dataset.rel;
    let text;
    if (kind === 'for') text = 'for ' + span(d);
    else if (kind === 'until') text = d > 0 ? 'ends in ' + span(d) : 'expired ' + span(d) + ' ago';
    else text = d > 1500 ? 'in ' + span(d) : (Math.abs(d) < 1500 ? 'now' : span(d) + ' ago');
    if (el.textContent !== text) el.textContent = text;
    const local = new Date(t).toLocaleString();
    if (el.title !== local) el.title = local;
  }

  function localClock(el) {
    const t = Date.parse(el.dataset.utc);
    if (isNaN(t)) return;
    const d = new Date(t);
    const text = el.dataset.fmt === 'clock' ? d.toLocaleTimeString() : d.toLocaleString();
    if (el.textContent !== text) el.textContent = text;
  }

  function tick() {
    document.querySelectorAll('time[datetime]').forEach(relative);
    document.querySelectorAll('[data-utc]').forEach(localClock);
  }

  // --- a task's hand-off note, on click ---------------------------------------------------------------------
  function taskOf(target) {
    const el = target.closest('[data-task], li[id^="task-"], g.node');
    if (!el) return null;
    if (el.dataset.task) return el.dataset.task;
    return el.id.replace(/^(task|node)-/, '');
  }

  function hideNote() {
    $('note').hidden = true;
  }

  async function showNote(id) {
    $('note-title').textContent = id;
    $('note-meta').textContent = 'loading…';
    $('note-text').textContent = '';
    $('note').hidden = false;
    try {
      const r = await fetch('/note/' + encodeURIComponent(id), { cache: 'no-store' });
      const j = await r.json();
      if (!r.ok) {
        $('note-meta').textContent = j.error || r.statusText;
        return;
      }
      $('note-title').textContent = j.id + (j.title ? ' ' + j.title : '');
      const meta = [j.status, j.kind !== 'work' ? j.kind : '', j.holder ? 'held by ' + j.holder : '',
        j.attempts + ' attempt(s)', j.deps.length ? 'after ' + j.deps.join(', ') : ''];
      $('note-meta').textContent = meta.filter(Boolean).join(' · ');
      $('note-text').textContent = j.note === null ? '(no hand-off note)' : j.note;
    } catch (e) {
      $('note-meta').textContent = 'cannot load the note: ' + e;
    }
  }

  document.addEventListener('click', (ev) => {
    const t = ev.target;
    if (!(t instanceof Element)) return;
    if (t.closest('#note')) {
      if (t.id === 'note-close' || t.id === 'note') hideNote();
      return;
    }
    const id = taskOf(t);
    if (id) showNote(id);
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') hideNote();
  });

  // --- new states: events, else polling --------------------------------------------------------------------
  function poll() {
    if (polling) return;
    const go = async () => {
      try {
        const r = await fetch('/frame', { cache: 'no-store' });
        if (!r.ok) throw new Error(r.status + ' ' + r.statusText);
        apply(await r.json());
        setConn('polling', 'polling');
      } catch (e) {
        setConn('down', 'server unreachable');
      }
    };
    go();
    polling = setInterval(go, 2000);
  }

  function listen() {
    if (!window.EventSource) {
      poll();
      return;
    }
    let errors = 0;
    source = new EventSource('/events');
    source.addEventListener('open', () => setConn('live', 'live'));
    source.addEventListener('board', (ev) => {
      errors = 0;
      setConn('live', 'live');
      try {
        apply(JSON.parse(ev.data));
      } catch (e) {
        setConn('down', 'a state the page cannot read');
      }
    });
    source.addEventListener('error', () => {
      errors += 1;
      // Refused (the server's stream limit) or failing again and again: poll instead.
      if (source.readyState === EventSource.CLOSED || errors >= 3) {
        source.close();
        poll();
      } else {
        setConn('reconnecting', 'reconnecting…');
      }
    });
  }

  try {
    $('zone').textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || 'your time zone';
  } catch (e) {
    $('zone').textContent = 'your time zone';
  }
  tick();
  setInterval(tick, 1000);
  listen();
})();
