// hookline console: a small hash-routed page over the JSON API. The same file is the portal
// (/portal, whose page says <html data-mode="portal">): the console in tenant mode, for a
// platform's customer, opened with a portal session's link. One set of pages serves both, so a
// fix or a feature reaches both at once; the portal leaves out the platform's pages (overview,
// drill) and the token form, calls subscribers endpoints, and ends at "this link has expired"
// when its session does. What a tenant may see and do is the API's to enforce, not this file's:
// the portal only leaves out controls that could not work.
//
// Rules this file keeps (the CSP and the data demand them):
// - Everything that came from the API (subscriber URLs, third-party response bodies, error
//   messages) reaches the DOM only as text nodes, through h() below. No innerHTML anywhere.
// - No inline scripts, styles or handlers: listeners are attached with addEventListener.
// - document.body.dataset.ready is "" while a page loads and the page's name once its data is
//   shown ("error" when loading failed), so a browser test can wait on it.
'use strict';

(() => {
  // ---------------------------------------------------------------- constants and state

  const PORTAL = document.documentElement.dataset.mode === 'portal';
  // Apart, so that a portal link opened in the console's tab leaves the operator's token be.
  const TOKEN_KEY = PORTAL ? 'hookline-portal-token' : 'hookline-token';
  // The first page, and what a subscriber is called: the portal's users know theirs as their
  // endpoints, and the name of the service they use is their platform's, not hookline.
  const HOME = PORTAL ? 'subscribers' : 'overview';
  const NOUN = PORTAL
    ? { one: 'endpoint', One: 'Endpoint', many: 'endpoints', Many: 'Endpoints' }
    : { one: 'subscriber', One: 'Subscriber', many: 'subscribers', Many: 'Subscribers' };
  const TITLE = PORTAL ? 'webhooks' : 'hookline';
  // A test event's delivery is followed once a second for at most a minute.
  const FOLLOW_MS = 1000;
  const FOLLOW_POLLS = 60;
  // The reasons a replay can select; reasons seen in the groups are added to these.
  const REPLAY_REASONS = ['attempts_exhausted', 'permanent_failure', 'window_expired', 'next_delay_exceeds_window', 'subscription_revoked'];
  const DELIVERY_STATES = ['scheduled', 'in_flight', 'delivered', 'dead'];
  const OVERVIEW_REFRESH_MS = 5000;

  const app = {
    who: null,        // the /v1/whoami answer
    canWrite: false,  // open mode or an admin token: the only callers shown write controls
    seq: 0,           // bumped on every page render, so late answers for old pages are dropped
    timer: null,      // the overview's refresh timer
  };

  const $ = (sel, root = document) => root.querySelector(sel);
  let view;

  // ---------------------------------------------------------------- DOM helpers

  // h('a', {href: '#/x', class: 'y'}, 'text', node, [more]) -> element. Strings become text
  // nodes, never markup; null/undefined/false children are skipped.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value == null || value === false) continue;
      if (key === 'class') el.className = value;
      else if (key === 'dataset') Object.assign(el.dataset, value);
      else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
      else el.setAttribute(key, value === true ? '' : String(value));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const child of [children].flat(Infinity)) {
      if (child == null || child === false) continue;
      el.append(child instanceof Node ? child : String(child));
    }
    return el;
  }

  const enc = encodeURIComponent;
  const none = () => h('span', { class: 'none' }, '—');
  const val = (v) => (v == null || v === '' ? none() : String(v));
  const link = (href, text, cls) => h('a', { href, class: cls }, text);
  const badge = (value) => h('span', { class: `badge b-${String(value).replace(/[^a-z0-9_]/gi, '')}` }, String(value));
  const yesNo = (b) => badge(b ? 'yes' : 'no');

  // Hash routes; ids are encoded so a '/' or '?' in one cannot change the route.
  const to = {
    subscriber: (id) => `#/subscribers/${enc(id)}`,
    delivery: (id) => `#/deliveries/${enc(id)}`,
    replay: (id) => `#/replays/${enc(id)}`,
    eventType: (name) => `#/event-types/${enc(name)}`,
    deadLetters: (filter) => `#/dead-letters${query(filter)}`,
    event: (id) => `#/events/${enc(id)}`,
    events: (filter) => `#/events${query(filter)}`,
  };

  // ?a=1&b=2 from an object, leaving out empty values (the API refuses unknown or odd ones).
  function query(params) {
    const parts = Object.entries(params || {})
      .filter(([, v]) => v != null && v !== '')
      .map(([k, v]) => `${enc(k)}=${enc(v)}`);
    return parts.length ? `?${parts.join('&')}` : '';
  }

  const subscriberLink = (id) => (id ? link(to.subscriber(id), id, 'subscriber-link') : none());
  const deliveryLink = (id) => link(to.delivery(id), id, 'delivery-link');

  // A table with a header row; `rows` are <tr>s, `empty` is what to say when there are none.
  function table(attrs, headers, rows, empty) {
    const body = h('tbody', null, rows);
    if (!rows.length) body.append(h('tr', { class: 'empty' }, h('td', { colspan: headers.length }, empty || 'nothing here')));
    return h('div', { class: 'table-wrap' },
      h('table', Object.assign({ class: 'grid' }, attrs),
        h('thead', null, h('tr', null, headers.map((t) => h('th', { class: /^(count|n|p\d\d( ms)?|attempts|failures|selected|delivered|dead|pending|limit)$/i.test(t) ? 'num' : null }, t)))),
        body));
  }

  // A two-column key/value table; a row is [label, value, tdAttrs?].
  function fields(rows) {
    return h('table', { class: 'fields' }, h('tbody', null,
      rows.filter(Boolean).map(([label, value, attrs]) =>
        h('tr', null, h('th', null, label), h('td', attrs || null, value == null || value === '' ? none() : value)))));
  }

  function card(title, ...children) {
    return h('section', { class: 'card' }, title ? h('h2', null, title) : null, children);
  }

  // ---------------------------------------------------------------- formatting

  // "3 min ago" / "in 20 s", from the browser's clock.
  function relative(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return '';
    const s = Math.round((Date.now() - t) / 1000);
    const a = Math.abs(s);
    if (a < 5) return 'just now';
    let text;
    if (a < 60) text = `${a} s`;
    else if (a < 3600) text = `${Math.floor(a / 60)} min`;
    else if (a < 86400) text = `${Math.floor(a / 3600)} h`;
    else text = `${Math.floor(a / 86400)} d`;
    return s >= 0 ? `${text} ago` : `in ${text}`;
  }

  // A time exactly as the API gave it, plus how long ago that was.
  function when(iso) {
    if (!iso) return none();
    return h('span', { class: 'when' }, h('time', { datetime: iso }, iso), ' ', h('span', { class: 'rel' }, relative(iso)));
  }

  // Seconds as "42 s", "3 min 5 s", "2 h 10 min", "1 d 4 h".
  function duration(seconds) {
    if (seconds == null || Number.isNaN(Number(seconds))) return '—';
    let s = Number(seconds);
    if (s < 10) return `${Math.round(s * 10) / 10} s`;
    s = Math.round(s);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ''}`;
    if (s < 86400) return `${Math.floor(s / 3600)} h${Math.floor(s % 3600 / 60) ? ` ${Math.floor(s % 3600 / 60)} min` : ''}`;
    return `${Math.floor(s / 86400)} d${Math.floor(s % 86400 / 3600) ? ` ${Math.floor(s % 86400 / 3600)} h` : ''}`;
  }

  function num(v, digits = 2) {
    if (v == null) return '—';
    if (typeof v !== 'number') return String(v);
    return Number.isInteger(v) ? v.toLocaleString('en-US') : v.toLocaleString('en-US', { maximumFractionDigits: digits });
  }

  const pct = (fraction) => (fraction == null ? '—' : `${num(fraction * 100, 1)}%`);

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // The token of this tab: in sessionStorage, or in memory only where a page in a frame may not
  // use storage (a browser blocking third-party storage).
  let heldToken = '';

  function getToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || heldToken;
    } catch (_) {
      return heldToken;
    }
  }

  function setToken(token) {
    heldToken = token;
    try {
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch (_) { /* kept in memory only */ }
  }

  // A portal link carries its session's token in the fragment (which no request and no Referer
  // carries): it is kept for this tab and taken out of the address bar, so that the history, a
  // bookmark or a screenshot does not keep it. Answers whether the address held one.
  function takeTokenFromLink() {
    const found = /^#token=([^&]+)/.exec(location.hash);
    if (!found) return false;
    setToken(decode(found[1]));
    history.replaceState(null, '', `${location.pathname}${location.search}#/${HOME}`);
    return true;
  }

  // One request; resolves to the parsed JSON (or a Blob), rejects with an ApiError that carries
  // the API's {"error": {"code", "message"}} when there is one.
  async function request(method, path, body, as = 'json') {
    const headers = { Accept: as === 'json' ? 'application/json' : '*/*' };
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = { method, headers, credentials: 'omit', cache: 'no-store' };
    if (body !== undefined) {
      // The API refuses bodies not declared as JSON (it keeps web pages from posting forms).
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, 'network_error', `could not reach hookline (${err.message})`);
    }
    const text = await res.text();
    if (res.ok && as === 'text') return text;
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!res.ok) {
      const e = data && data.error;
      if (e && e.code) throw new ApiError(res.status, e.code, e.message || '');
      throw new ApiError(res.status, `http_${res.status}`, text.slice(0, 300) || res.statusText);
    }
    if (data === null && text) throw new ApiError(res.status, 'bad_response', `${method} ${path} did not answer JSON`);
    return data;
  }

  const get = (path) => request('GET', path);
  const send = (method, path, body) => request(method, path, body);

  // Any thrown thing as an ApiError, so a bug in this file is shown like an API error.
  const asApiError = (err) => (err instanceof ApiError ? err : new ApiError(0, 'console_error', String(err && err.message || err)));

  // ---------------------------------------------------------------- flash and errors

  function flash(kind, message, code, source) {
    const el = $('#flash');
    el.className = kind;
    el.dataset.source = source || '';
    el.hidden = false;
    const text = h('span', { class: 'flash-text' }, code ? h('span', { class: 'flash-code' }, code) : null, code ? ': ' : null, message);
    const close = h('button', { type: 'button', class: 'flash-close', title: 'dismiss', 'aria-label': 'dismiss' }, '×');
    close.addEventListener('click', () => clearFlash());
    el.replaceChildren(text, close);
  }

  const ok = (message) => flash('ok', message);

  // Clears the flash; with a source, only a flash that source set (the overview's refresh
  // clears its own failure once it works again, not someone else's).
  function clearFlash(source) {
    const el = $('#flash');
    if (source && el.dataset.source !== source) return;
    el.hidden = true;
    el.className = '';
    el.replaceChildren();
  }

  // Shows an error in the flash; a 401 also brings up the token form (in the portal, it ends
  // the portal: the link no longer works).
  function report(err, source) {
    const e = asApiError(err);
    if (ended(e)) return e;
    flash('error', e.message, e.code, source);
    if (e.status === 401) showTokenForm(`${e.code}: ${e.message}`);
    return e;
  }

  // In the portal a 401 means the session's link no longer works (expired, revoked, or never
  // valid): says so, and nothing else. Answers whether it did.
  function ended(err) {
    if (!PORTAL || !(err instanceof ApiError) || err.status !== 401) return false;
    showExpired();
    return true;
  }

  function showExpired() {
    leavePage();
    app.seq++; // answers still coming for the page that was loading are dropped
    app.who = null;
    app.canWrite = false;
    setToken('');
    clearFlash();
    $('.nav').hidden = true;
    $('#whoami').textContent = '';
    view.classList.remove('busy');
    view.replaceChildren(h('section', { class: 'card', id: 'expired' },
      h('h1', null, 'This link has expired'),
      h('p', null, 'Ask for a new one.')));
    document.title = 'Link expired';
    document.body.dataset.ready = 'expired';
  }

  function errorPanel(err) {
    const e = asApiError(err);
    // The flash and the token form already say what is wrong; don't say it a third time.
    if (e.status === 401) return h('p', { class: 'muted' }, 'This page needs an API token: paste one above.');
    return h('section', { class: 'card error-panel' },
      h('h2', null, e.status ? `${e.code} (HTTP ${e.status})` : e.code), h('p', null, e.message));
  }

  // ---------------------------------------------------------------- token and whoami

  function showTokenForm(message) {
    $('#token-message').textContent = message || '';
    $('#token-form').hidden = false;
    $('#token-input').focus();
  }

  function hideTokenForm() {
    $('#token-form').hidden = true;
    $('#token-message').textContent = '';
  }

  function renderWho() {
    const el = $('#whoami');
    const who = app.who;
    el.classList.toggle('open', Boolean(who && who.open));
    if (!who) el.textContent = 'not signed in';
    else if (who.open) el.textContent = 'open mode (loopback)';
    else if (PORTAL) el.textContent = `${who.tenant_id} · ${who.scope === 'admin' ? 'admin' : 'read only'}`;
    else el.textContent = `${who.name}${who.tenant_id ? ` of tenant ${who.tenant_id}` : ''} (${who.scope})`;
    const forget = $('#token-forget');
    if (forget) forget.hidden = !getToken();
  }

  // Asks who we are (which decides the write controls), then shows the page in the hash.
  async function start() {
    document.body.dataset.ready = '';
    try {
      app.who = await get('/v1/whoami');
    } catch (err) {
      if (ended(err)) return;
      app.who = null;
      app.canWrite = false;
      renderWho();
      view.replaceChildren(errorPanel(err));
      report(err);
      document.body.dataset.ready = 'error';
      return;
    }
    // The portal acts for a tenant or not at all (a platform's token, or none in open mode,
    // would show the platform's objects under the tenant's page).
    if (PORTAL && !app.who.tenant_id) {
      showExpired();
      return;
    }
    app.canWrite = Boolean(app.who.open || app.who.scope === 'admin');
    $('.nav').hidden = false;
    renderWho();
    if (!PORTAL) hideTokenForm(); // the portal has none: its token comes with its link
    route();
  }

  function setupToken() {
    $('#token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('#token-input').value.trim();
      if (!token) {
        $('#token-message').textContent = 'paste a token first';
        return;
      }
      setToken(token);
      $('#token-input').value = '';
      clearFlash();
      start();
    });
    $('#token-forget').addEventListener('click', (ev) => {
      ev.preventDefault();
      setToken('');
      clearFlash();
      start().then(() => { if (app.who) ok('token forgotten'); });
    });
  }

  // ---------------------------------------------------------------- routing

  function decode(part) {
    try { return decodeURIComponent(part); } catch (_) { return part; }
  }

  // "#/dead-letters?reason=x" -> {parts: ["dead-letters"], params: URLSearchParams}
  function parseHash() {
    let path = location.hash.replace(/^#\/?/, '');
    let search = '';
    const q = path.indexOf('?');
    if (q >= 0) {
      search = path.slice(q + 1);
      path = path.slice(0, q);
    }
    // Split before decoding: an encoded '/' inside an id stays inside it.
    return { parts: path.split('/').filter(Boolean).map(decode), params: new URLSearchParams(search) };
  }

  // Shows a page built with what only this moment has (a secret shown once) at its address,
  // without the hashchange that would build it again without that.
  function show(hash, name, build) {
    leavePage();
    history.pushState(null, '', hash);
    highlight(parseHash().parts[0]);
    return render(name, build);
  }

  function highlight(section) {
    const page = section === 'deliveries' ? 'subscribers' : section;
    for (const a of document.querySelectorAll('a[data-nav]')) a.classList.toggle('active', a.dataset.nav === page);
  }

  // Navigates; re-renders when the hash is already there (no hashchange would fire).
  function go(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  }

  function leavePage() {
    clearTimeout(app.timer);
    app.timer = null;
  }

  function route() {
    leavePage();
    const { parts, params } = parseHash();
    const [section = HOME, id, ...rest] = parts;
    highlight(section);
    const known = {
      overview: () => !PORTAL && !id && render('overview', pageOverview),
      subscribers: () => (id ? render('subscriber', () => pageSubscriber(id)) : render('subscribers', pageSubscribers)),
      deliveries: () => id && render('delivery', () => pageDelivery(id)),
      events: () => !PORTAL && (id ? render('event', () => pageEvent(id)) : render('events', () => pageEvents(params))),
      'dead-letters': () => !id && render('dead-letters', () => pageDeadLetters(params)),
      replays: () => (id ? render('replay', () => pageReplay(id)) : render('replays', pageReplays)),
      drill: () => !PORTAL && !id && render('drill', pageDrill),
      // The catalog is the platform's: the portal leaves it out.
      'event-types': () => !PORTAL && (id ? render('event-type', () => pageEventType(id)) : render('event-types', pageEventTypes)),
    };
    if (rest.length || !known[section] || !known[section]()) {
      render('not-found', async () => card('No such page', h('p', null, 'Nothing lives at ', h('code', null, location.hash), '. ',
        link(`#/${HOME}`, `Back to ${PORTAL ? 'your endpoints' : 'the overview'}`))));
    }
    return true;
  }

  // Builds a page (async, fetching its data) and shows it, unless another page was asked for
  // meanwhile. `keep` leaves the current content up (dimmed) while reloading the same page.
  async function render(name, build, keep = false) {
    const seq = ++app.seq;
    document.body.dataset.ready = '';
    document.title = `${TITLE} · ${name}`;
    if (keep) view.classList.add('busy');
    else view.replaceChildren(h('p', { class: 'loading' }, 'loading…'));
    try {
      const node = await build(seq);
      if (seq !== app.seq) return;
      view.replaceChildren(node);
      document.body.dataset.ready = name;
    } catch (err) {
      if (seq !== app.seq || ended(err)) return;
      view.replaceChildren(errorPanel(err));
      report(err);
      document.body.dataset.ready = 'error';
    } finally {
      if (seq === app.seq) view.classList.remove('busy');
    }
  }

  const current = (seq) => seq === app.seq;

  // Runs an in-page action (a filter change, a button): "" while it runs, the page's name after,
  // and any failure in the flash.
  async function busy(name, seq, fn) {
    document.body.dataset.ready = '';
    try {
      await fn();
    } catch (err) {
      if (current(seq)) report(err);
    } finally {
      if (current(seq)) document.body.dataset.ready = name;
    }
  }

  // ---------------------------------------------------------------- overview

  async function pageOverview(seq) {
    const data = await get('/v1/overview');
    scheduleOverview(seq);
    return overviewView(data);
  }

  // Refreshes in place every 5 s while the overview is shown; leavePage() stops it.
  function scheduleOverview(seq) {
    app.timer = setTimeout(async () => {
      if (!current(seq)) return;
      try {
        const data = await get('/v1/overview');
        if (!current(seq)) return;
        view.replaceChildren(overviewView(data));
        clearFlash('overview');
      } catch (err) {
        if (!current(seq)) return;
        if (report(err, 'overview').status === 401) return; // no point retrying without a token
      }
      if (current(seq)) scheduleOverview(seq);
    }, OVERVIEW_REFRESH_MS);
  }

  function overviewView(o) {
    const d = o.deliveries || {};
    const waiting = o.oldest_waiting_age_s || {};
    const inflow = o.dead_letters_last_hour || [];
    const breakers = o.open_breakers || [];
    const total = inflow.reduce((sum, g) => sum + (g.count || 0), 0);
    return h('div', { id: 'overview' },
      h('div', { class: 'page-head' }, h('h1', null, 'Overview'),
        h('span', { class: 'measured' }, 'measured at ', when(o.measured_at), ' · refreshes every 5 s')),
      h('div', { class: 'grid-2' },
        card('Queue depths', h('div', { id: 'queue-depths', class: 'tiles' },
          DELIVERY_STATES.map((s) => h('div', { class: `tile t-${s}`, dataset: { state: s } },
            h('div', { class: 'n' }, num(d[s] || 0)), h('div', { class: 'k' }, s))))),
        card('Oldest waiting', h('div', { id: 'oldest-ages' }, fields([
          ['ready for a worker', duration(o.oldest_ready_age_s)],
          ['held by in-flight cap', duration(waiting.cap)],
          ['held by host at its cap', duration(waiting.host_cap)],
          ['held by rate limit', duration(waiting.rate_limit)],
          ['held by open breaker', heldByBreakers(o.held_by_open_breakers, breakers.length, waiting.breaker)],
          ['held by paused subscriber', duration(waiting.paused)],
          ['retrying (since first seen)', duration(o.oldest_retrying_age_s)],
        ])))),
      h('div', { class: 'grid-3' },
        card('Dead letters, last hour', h('div', { id: 'dead-inflow' },
          table(null, ['reason', 'count'], inflow.map((g) => h('tr', { dataset: { reason: g.reason } },
            h('td', null, link(to.deadLetters({ reason: g.reason }), g.reason)),
            h('td', { class: 'num' }, num(g.count)))), 'none in the last hour'),
          h('p', null, `${num(total)} in the last hour · `, link('#/dead-letters', 'all dead letters →'))),
        ),
        card('Open breakers', h('div', { id: 'open-breakers' },
          breakers.length
            ? h('ul', { class: 'link-list' }, breakers.map((id) => h('li', { dataset: { subscriberId: id } }, subscriberLink(id))))
            : h('p', { class: 'muted' }, 'no breaker is open'))),
        card('Running rollout', rolloutView(o.rollout))),
      card('Admission', admissionView(o.capacity || {})));
  }

  // Deliveries behind open breakers: a claim defers them to the half-open time, so the due-age
  // figure (`waiting`) seldom sees them; the count and the oldest's age do.
  function heldByBreakers(held, open, waiting) {
    const n = (held && held.deliveries) || 0;
    const text = n
      ? `${num(n)} ${n === 1 ? 'delivery' : 'deliveries'} behind ${num(open)} open breaker${open === 1 ? '' : 's'}, the oldest first seen ${duration(held.oldest_first_seen_age_s)} ago`
      : duration(waiting);
    return h('span', { id: 'held-by-breakers' }, text);
  }

  function admissionView(c) {
    const drain = c.projected_drain_s == null ? 'unknown (no measured service rate)' : duration(c.projected_drain_s);
    return h('div', { id: 'admission' }, h('div', { class: 'grid-2' },
      fields([
        ['admitting', h('span', null, yesNo(c.admitting), c.refusing_reason ? h('span', { class: 'refusing' }, ` refusing: ${c.refusing_reason}`) : null)],
        ['backlog', `${num(c.backlog)} (${num(c.due_backlog)} due, ${num(c.held_backlog)} held) of max ${num(c.max_backlog)}`],
        ['room', num(c.room)],
        ['projected drain', `${drain} vs window ${duration(c.delivery_window_s)} (limit ${duration(c.max_projected_drain_s)})`],
        ['utilization', pct(c.utilization)],
      ]),
      fields([
        ['service rate', `${num(c.service_rate_per_s)} /s`],
        ['new attempts', `${num(c.new_attempts_per_s)} /s`],
        ['retry attempts', `${num(c.retry_attempts_per_s)} /s`],
        ['failure rate', pct(c.failure_rate)],
        ['sustainable rate', c.sustainable_rate_per_s == null ? 'unknown' : `${num(c.sustainable_rate_per_s)} /s`],
        ['max attempts', num(c.max_attempts)],
      ])));
  }

  function rolloutView(r) {
    if (!r) return h('div', { id: 'rollout' }, h('p', { class: 'muted' }, 'no rollout running'));
    return h('div', { id: 'rollout', dataset: { rolloutId: r.id } }, fields([
      ['policy', h('span', null, h('code', null, r.policy), ' vs baseline ', h('code', null, r.baseline))],
      ['percent', `${num(r.percent)}%`],
      ['state', badge(r.state)],
      r.reason ? ['reason', r.reason] : null,
      r.subscriber_ids && r.subscriber_ids.length ? ['subscribers', r.subscriber_ids.map((id, i) => [i ? ', ' : '', subscriberLink(id)])] : null,
      ['started', when(r.started_at)],
      r.ended_at ? ['ended', when(r.ended_at)] : null,
      ['by', val(r.created_by)],
      ['id', h('code', null, r.id)],
    ]));
  }

  // ---------------------------------------------------------------- subscribers

  async function pageSubscribers(seq) {
    const list = { items: [], next: null, filter: '' };
    const tbody = h('tbody');
    const count = h('span', { id: 'subscribers-count', class: 'muted' });
    const more = h('button', { id: 'subscribers-more', type: 'button' }, 'load more');
    const input = h('input', { id: 'subscriber-search', type: 'search', placeholder: `${NOUN.one} id, or part of an id or URL`, size: 40, spellcheck: 'false', autocomplete: 'off' });
    const form = h('form', { class: 'row', role: 'search' }, input, h('button', { id: 'subscriber-search-go', type: 'submit' }, 'Search'));

    // The server searches (id or URL, any case); pages follow the same search.
    async function loadPage() {
      const page = await get(`/v1/subscribers${query({ contains: list.filter || null, limit: 200, cursor: list.next })}`);
      list.items.push(...page.items);
      list.next = page.next_cursor;
      draw();
    }

    function draw() {
      tbody.replaceChildren(...list.items.map(subscriberRow));
      if (!list.items.length) tbody.append(h('tr', { class: 'empty' }, h('td', { colspan: SUBSCRIBER_COLUMNS.length }, list.filter ? `no ${NOUN.one} matches` : `no ${NOUN.many}`)));
      const loaded = `${list.items.length}${list.next ? '+' : ''}`;
      count.textContent = list.filter
        ? `${loaded} ${NOUN.many} whose id or URL contains "${list.filter}"`
        : `${loaded} ${NOUN.many}`;
      more.hidden = !list.next;
    }

    // An exact id goes straight to the subscriber; anything else is searched for.
    async function search() {
      const text = input.value.trim();
      if (text) {
        try {
          const sub = await get(`/v1/subscribers/${enc(text)}`);
          go(to.subscriber(sub.id));
          return;
        } catch (err) {
          // 404 just means "not an id": filter instead. Anything else is worth showing.
          if (!(err instanceof ApiError && err.status === 404)) report(err);
        }
      }
      list.filter = text;
      list.items = [];
      list.next = null;
      await loadPage();
    }

    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy('subscribers', seq, search);
    });
    more.addEventListener('click', () => busy('subscribers', seq, loadPage));

    await loadPage();
    return h('div', { id: 'subscribers' },
      h('div', { class: 'page-head' }, h('h1', null, NOUN.Many), count),
      h('div', { class: 'actions' }, form),
      h('div', { class: 'table-wrap' }, h('table', { class: 'grid', id: 'subscribers-table' },
        h('thead', null, h('tr', null, SUBSCRIBER_COLUMNS.map((t) => h('th', { class: /^(failures|dead, 1 h)$/.test(t) ? 'num' : null }, t)))),
        tbody)),
      h('div', { class: 'actions' }, more),
      app.canWrite ? newSubscriberForm(seq) : null);
  }

  // Event types as typed: separated by commas; none is every type.
  const eventTypes = (text) => text.split(',').map((t) => t.trim()).filter(Boolean);

  function typesText(types) {
    return (types || []).join(', ');
  }

  // Adds a subscriber (admin; a tenant's token adds one of its own). Its signing secret is
  // shown once, on the page of the new subscriber.
  function newSubscriberForm(seq) {
    const input = (id, type, placeholder) => h('input', { id, type, placeholder, spellcheck: 'false', autocomplete: 'off' });
    const url = input('subscriber-new-url', 'url', 'https://…');
    const types = input('subscriber-new-types', 'text', 'every event type');
    const id = input('subscriber-new-id', 'text', 'made up when empty');
    // The platform's operators say whose it is; a tenant's token makes its own.
    const tenant = app.who.tenant_id ? null : input('subscriber-new-tenant', 'text', 'none');
    const form = h('form', { id: 'subscriber-new', class: 'card', autocomplete: 'off', novalidate: true },
      h('h2', null, `Add ${PORTAL ? 'an' : 'a'} ${NOUN.one}`),
      h('div', { class: 'form-grid' },
        h('label', { for: 'subscriber-new-url' }, 'URL'), url,
        h('label', { for: 'subscriber-new-types' }, 'event types (comma-separated)'), types,
        h('label', { for: 'subscriber-new-id' }, 'id'), id,
        tenant ? [h('label', { for: 'subscriber-new-tenant' }, 'tenant'), tenant] : null),
      h('div', { class: 'actions' }, h('button', { id: 'subscriber-create', type: 'submit', class: 'primary' }, 'Add')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy('subscribers', seq, async () => {
        const body = { url: url.value.trim(), event_types: eventTypes(types.value) };
        if (id.value.trim()) body.id = id.value.trim();
        if (tenant && tenant.value.trim()) body.tenant_id = tenant.value.trim();
        const created = await send('POST', '/v1/subscribers', body);
        ok(`${NOUN.one} ${created.id} added`);
        show(to.subscriber(created.id), 'subscriber', () => pageSubscriber(created.id, { created }));
      });
    });
    return form;
  }

  // A breaker counts retryable failures only: the last outcome and the recent dead letters
  // show a subscriber whose every delivery dies (404, 400) with its breaker closed.
  const SUBSCRIBER_COLUMNS = ['id', 'url', 'event types', 'status', 'breaker', 'failures', 'last outcome', 'dead, 1 h'];

  function subscriberRow(s) {
    const b = s.breaker || {};
    const activity = s.activity || {};
    return h('tr', { dataset: { subscriberId: s.id } },
      h('td', { class: 'id' }, subscriberLink(s.id)),
      h('td', { class: 'url' }, s.url),
      h('td', null, (s.event_types || []).length ? typesText(s.event_types) : h('span', { class: 'muted' }, 'all')),
      h('td', null, badge(s.status)),
      h('td', null, badge(b.state || 'closed')),
      h('td', { class: 'num' }, num(b.consecutive_failures || 0)),
      h('td', { class: 'last-outcome' }, lastOutcome(activity.last_attempt)),
      h('td', { class: 'num dead-last-hour' }, num(activity.dead_letters_last_hour)));
  }

  // "permanent 404 · 3 min ago", linking to the delivery it came from.
  function lastOutcome(a) {
    if (!a) return none();
    return h('span', null, badge(a.outcome), a.status == null ? '' : ` ${a.status}`, ' ',
      link(to.delivery(a.delivery_id), relative(a.started_at) || a.started_at, 'delivery-link'));
  }

  // ---------------------------------------------------------------- subscriber

  // `secret` is the answer that just made a signing secret (`created`: the subscriber's, or
  // `rotated`: a rotation's): shown once, in this render only.
  async function pageSubscriber(id, secret, seq = app.seq) {
    const s = await get(`/v1/subscribers/${enc(id)}`);
    const b = s.breaker || {};
    const deliveries = subscriberDeliveries(s, seq);
    await deliveries.load();
    const writable = app.canWrite && s.status !== 'revoked';
    return h('div', { id: 'subscriber', dataset: { subscriberId: s.id } },
      h('div', { class: 'crumbs' }, link('#/subscribers', NOUN.Many), ' /'),
      h('div', { class: 'page-head' }, h('h1', null, `${NOUN.One} `, h('code', null, s.id)), badge(s.status), badge(b.state || 'closed')),
      secret ? secretShownOnce(secret) : null,
      app.canWrite ? subscriberActions(s, seq, deliveries.load) : null,
      card(NOUN.One, fields([
        ['id', h('code', null, s.id)],
        ['url', h('code', null, s.url)],
        ['status', h('span', { id: 'subscriber-status' }, s.status)],
        PORTAL ? null : ['tenant', val(s.tenant_id)],
        ['event types', (s.event_types || []).length ? typesText(s.event_types) : 'all event types'],
        ['created', when(s.created_at)],
        ['updated', when(s.updated_at)],
        ['previous secret valid until', when(s.previous_secret_valid_until)],
        ['max in flight', s.max_in_flight == null ? 'default' : num(s.max_in_flight)],
        ['rate limit', s.rate_limit_per_second == null ? 'none' : `${num(s.rate_limit_per_second)} /s`],
        ['payload version', s.payload_version == null ? 'latest' : String(s.payload_version)],
        ['header names', (s.header_names || []).length ? s.header_names.join(', ') : none()],
        ['breaker', h('span', { id: 'subscriber-breaker' }, badge(b.state || 'closed'))],
        ['consecutive failures', num(b.consecutive_failures || 0)],
        ['breaker open until', when(b.open_until)],
        ['last outcome', lastOutcome((s.activity || {}).last_attempt)],
        ['dead letters, last hour', num((s.activity || {}).dead_letters_last_hour)],
      ])),
      deliveries.node,
      writable ? subscriberResend(s, seq, deliveries.load) : null,
      writable ? subscriberEdit(s, seq) : null);
  }

  // Resend: published events sent again to this subscriber under fresh webhook-ids (for one
  // that lost what it was sent). Preview (dry run) first; confirm sends exactly what was
  // previewed and is enabled only while the form is unchanged since. Below, its resends.
  function subscriberResend(s, seq, reload) {
    const dayAgo = new Date(Date.now() - 24 * 3600 * 1000).toISOString();
    const since = h('input', { id: 'resend-since', type: 'text', value: dayAgo, size: 26, spellcheck: 'false', autocomplete: 'off' });
    const until = h('input', { id: 'resend-until', type: 'text', placeholder: 'now', size: 26, spellcheck: 'false', autocomplete: 'off' });
    const types = h('input', { id: 'resend-types', type: 'text', placeholder: 'every type it takes', spellcheck: 'false', autocomplete: 'off' });
    const limit = h('input', { id: 'resend-limit', type: 'number', min: 1, max: 1000, step: 1, value: 100 });
    const preview = h('button', { id: 'resend-preview', type: 'submit', class: 'primary' }, 'Preview');
    const confirm = h('button', { id: 'resend-confirm', type: 'button', class: 'danger', disabled: true }, 'Resend');
    const previewBox = h('div', { id: 'resend-preview-result', hidden: true });
    const resultBox = h('div', { id: 'resend-result', hidden: true });
    const listBox = h('div', { id: 'resends' });
    let previewed = null; // the body of the preview shown, if it is still valid

    function invalidate() {
      previewed = null;
      confirm.disabled = true;
      confirm.textContent = 'Resend';
      previewBox.hidden = true;
      previewBox.replaceChildren();
    }

    // The request body from the inputs; the server checks the times and says what is wrong.
    function body() {
      const n = Number(limit.value);
      if (!limit.value || !Number.isInteger(n) || n < 1 || n > 1000) throw new ApiError(0, 'invalid', 'limit must be a whole number from 1 to 1000');
      const out = { subscriber_id: s.id, since: since.value.trim(), limit: n };
      if (until.value.trim()) out.until = until.value.trim();
      const t = eventTypes(types.value);
      if (t.length) out.event_types = t;
      return out;
    }

    async function loadResends() {
      const page = await get(`/v1/resends${query({ subscriber_id: s.id, limit: 20 })}`);
      listBox.replaceChildren(page.items.length
        ? h('table', null,
          h('thead', null, h('tr', null, ['resend', 'made', 'since', 'until', 'selected', 'delivered', 'dead'].map((c) => h('th', null, c)))),
          h('tbody', null, page.items.map((r) => h('tr', { dataset: { resendId: r.id } },
            h('td', null, h('code', null, r.id)), h('td', null, when(r.created_at)),
            h('td', null, when(r.since)), h('td', null, when(r.until)),
            h('td', null, num(r.selected)), h('td', null, num(r.delivered)), h('td', null, num(r.dead))))))
        : h('p', { class: 'muted' }, 'no resends to it yet'));
    }

    const form = h('form', { id: 'resend-form', class: 'card', autocomplete: 'off', novalidate: true },
      h('h2', null, 'Resend events'),
      h('p', { class: 'hint' }, `Sends published events again to this ${NOUN.one}, each under a new webhook-id, for one that lost what it was sent. Preview shows what a resend would send now; confirm sends exactly those. Resends are audited.`),
      h('div', { class: 'form-grid' },
        h('label', { for: 'resend-since' }, 'accepted since (RFC 3339)'), since,
        h('label', { for: 'resend-until' }, 'until (RFC 3339)'), until,
        h('label', { for: 'resend-types' }, 'event types (comma-separated)'), types,
        h('label', { for: 'resend-limit' }, 'limit (1–1000)'), limit),
      h('div', { class: 'actions' }, preview, confirm),
      previewBox, resultBox,
      h('h3', null, 'Resends to it, newest first'), listBox);

    form.addEventListener('input', invalidate);
    form.addEventListener('change', invalidate);
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy('subscriber', seq, async () => {
        invalidate();
        const req = body();
        const answer = await send('POST', '/v1/resends', Object.assign({}, req, { dry_run: true }));
        const ids = answer.event_ids || [];
        const shown = ids.slice(0, 20);
        previewBox.replaceChildren();
        append(previewBox, [
          h('p', null, 'A resend would send ', h('strong', { id: 'resend-selected' }, String(answer.selected)), ` event${answer.selected === 1 ? '' : 's'}${ids.length > shown.length ? `, the first ${shown.length} of them:` : '.'}`),
          shown.length ? h('ul', { class: 'id-list' }, shown.map((id) => h('li', { dataset: { eventId: id } }, h('code', null, id)))) : null]);
        previewBox.hidden = false;
        // Confirm sends exactly these or nothing (409: preview again).
        previewed = Object.assign({}, req, { expected_event_ids: ids });
        confirm.disabled = answer.selected === 0;
        confirm.textContent = `Resend ${answer.selected}`;
      });
    });

    confirm.addEventListener('click', () => {
      if (!previewed) return;
      const req = previewed;
      busy('subscriber', seq, async () => {
        confirm.disabled = true;
        let answer;
        try {
          answer = await send('POST', '/v1/resends', req);
        } catch (err) {
          if (err instanceof ApiError && err.status === 409) invalidate();
          else confirm.disabled = false;
          throw err;
        }
        invalidate();
        resultBox.replaceChildren(h('p', { id: 'resend-made', dataset: { resendId: answer.id } }, 'resend ', h('code', null, answer.id),
          ` made ${answer.selected} deliveries`));
        resultBox.hidden = false;
        ok(`resend ${answer.id} made ${answer.selected} deliveries`);
        await loadResends();
        await reload();
      });
    });

    busy('subscriber', seq, loadResends);
    return form;
  }

  function secretShownOnce({ created, rotated }) {
    const answer = created || rotated;
    return h('section', { class: 'card secret-box', id: 'shown-secret' },
      h('p', { class: 'warning' }, `${created ? 'Its signing secret' : 'New signing secret'}: it is shown only now. Copy it to the receiver before leaving this page.`),
      h('p', null, h('code', { id: 'shown-secret-value' }, answer.secret)),
      rotated ? h('p', { class: 'hint' }, 'The previous secret stays valid until ', when(rotated.previous_secret_valid_until), '.') : null);
  }

  const rerenderSubscriber = (id, secret) => render('subscriber', () => pageSubscriber(id, secret, app.seq), true);

  // Where its deliveries go and which event types it takes (admin, not revoked).
  function subscriberEdit(s, seq) {
    const url = h('input', { id: 'subscriber-edit-url', type: 'url', value: s.url, spellcheck: 'false', autocomplete: 'off' });
    const types = h('input', { id: 'subscriber-edit-types', type: 'text', value: typesText(s.event_types), placeholder: 'every event type', spellcheck: 'false', autocomplete: 'off' });
    const save = h('button', { id: 'subscriber-save', type: 'submit', class: 'primary' }, 'Save');
    const form = h('form', { id: 'subscriber-edit', class: 'card', autocomplete: 'off', novalidate: true },
      h('h2', null, 'Change'),
      h('div', { class: 'form-grid' },
        h('label', { for: 'subscriber-edit-url' }, 'URL'), url,
        h('label', { for: 'subscriber-edit-types' }, 'event types (comma-separated)'), types),
      h('div', { class: 'actions' }, save));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy('subscriber', seq, async () => {
        save.disabled = true;
        try {
          await send('PATCH', `/v1/subscribers/${enc(s.id)}`, { url: url.value.trim(), event_types: eventTypes(types.value) });
        } finally {
          save.disabled = false;
        }
        ok(`${s.id} changed`);
        await rerenderSubscriber(s.id);
      });
    });
    return form;
  }

  // Pause/resume, secret rotation and a test event; only rendered for admin tokens and open
  // mode. `reload` reloads the subscriber's deliveries.
  function subscriberActions(s, seq, reload) {
    const rerender = (rotated) => rerenderSubscriber(s.id, rotated && { rotated });
    const bar = h('div', { class: 'actions', id: 'subscriber-actions' });
    if (s.status === 'revoked') {
      bar.append(h('span', { class: 'muted' }, 'revoked: nothing can be changed'));
      return bar;
    }
    const paused = s.status === 'paused';
    const toggle = h('button', { id: paused ? 'resume' : 'pause', type: 'button', class: paused ? 'primary' : null }, paused ? 'Resume' : 'Pause');
    toggle.addEventListener('click', () => busy('subscriber', seq, async () => {
      toggle.disabled = true;
      try {
        await send('PATCH', `/v1/subscribers/${enc(s.id)}`, { status: paused ? 'active' : 'paused' });
      } finally {
        toggle.disabled = false;
      }
      ok(`${s.id} ${paused ? 'resumed' : 'paused'}`);
      await rerender();
    }));

    const grace = h('input', { id: 'rotate-grace', type: 'text', value: '24h', size: 8, spellcheck: 'false' });
    const confirm = h('button', { id: 'rotate-confirm', type: 'button', class: 'danger' }, 'Rotate now');
    const cancel = h('button', { type: 'button', class: 'link' }, 'cancel');
    const form = h('span', { id: 'rotate-form', class: 'row', hidden: true },
      h('label', { for: 'rotate-grace' }, 'old secret stays valid for'), grace, confirm, cancel);
    const rotate = h('button', { id: 'rotate-secret', type: 'button' }, 'Rotate secret…');
    rotate.addEventListener('click', () => { form.hidden = false; grace.focus(); });
    cancel.addEventListener('click', () => { form.hidden = true; });
    confirm.addEventListener('click', () => busy('subscriber', seq, async () => {
      confirm.disabled = true;
      let answer;
      try {
        answer = await send('POST', `/v1/subscribers/${enc(s.id)}/secret/rotate`, { grace_period: grace.value.trim() });
      } finally {
        confirm.disabled = false;
      }
      ok(`secret of ${s.id} rotated`);
      await rerender(answer);
    }));
    const test = h('button', { id: 'send-test-event', type: 'button' }, 'Send test event');
    const followed = h('div', { id: 'test-event', class: 'test-event', hidden: true });
    test.addEventListener('click', () => busy('subscriber', seq, async () => {
      test.disabled = true;
      let receipt;
      try {
        receipt = await send('POST', `/v1/subscribers/${enc(s.id)}/test-event`);
      } finally {
        test.disabled = false;
      }
      ok(`test event ${receipt.id} sent to ${s.id}`);
      follow(followed, `${receipt.id}:${s.id}`, seq, reload);
    }));
    bar.append(toggle, rotate, form, test);
    return h('div', null, bar, followed);
  }

  // Shows a test event's delivery and follows its state until it ends (delivered or dead),
  // then reloads the delivery log; leaving the page stops it (`leavePage`).
  function follow(box, deliveryId, seq, reload) {
    const state = h('span', { id: 'test-event-state' }, badge('scheduled'));
    box.replaceChildren(h('p', null, 'Test event: delivery ', deliveryLink(deliveryId), ' ', state));
    box.hidden = false;
    clearTimeout(app.timer);
    let polls = 0;
    const poll = async () => {
      let d;
      try {
        d = await get(`/v1/deliveries/${enc(deliveryId)}`);
      } catch (err) {
        if (current(seq)) report(err);
        return;
      }
      if (!current(seq)) return;
      state.replaceChildren(badge(d.state));
      if (d.state === 'delivered' || d.state === 'dead') await reload();
      else if (++polls < FOLLOW_POLLS) app.timer = setTimeout(poll, FOLLOW_MS);
    };
    poll();
  }

  // The subscriber's recent deliveries, filtered by state with select#delivery-state-filter.
  function subscriberDeliveries(s, seq) {
    const select = h('select', { id: 'delivery-state-filter' },
      h('option', { value: 'all' }, 'all'), DELIVERY_STATES.map((st) => h('option', { value: st }, st)));
    const box = h('div');
    const more = h('button', { id: 'deliveries-more', type: 'button', hidden: true }, 'load more');
    let next = null;
    let rows = [];

    async function load(cursor) {
      const state = select.value === 'all' ? null : select.value;
      try {
        const page = await get(`/v1/deliveries${query({ subscriber_id: s.id, state, order: 'newest', limit: 100, cursor })}`);
        rows = cursor ? rows.concat(page.items) : page.items;
        next = page.next_cursor;
        box.replaceChildren(deliveriesTable(rows));
      } catch (err) {
        // The subscriber itself is shown; say why its deliveries are not.
        box.replaceChildren(errorPanel(err));
        next = null;
        if (current(seq)) report(err);
      }
      more.hidden = !next;
    }

    select.addEventListener('change', () => busy('subscriber', seq, () => load()));
    more.addEventListener('click', () => busy('subscriber', seq, () => load(next)));
    const node = card(null,
      h('div', { class: 'filter-bar' }, h('h2', null, 'Recent deliveries (newest first)'),
        h('label', { for: 'delivery-state-filter' }, 'state'), select,
        h('span', { class: 'spacer' }),
        link(to.deadLetters({ subscriber_id: s.id }), `dead letters of this ${NOUN.one} →`, 'dead-letters-link')),
      box, h('div', { class: 'actions' }, more));
    return { node, load: () => load() };
  }

  function deliveriesTable(items) {
    return table({ id: 'deliveries' }, ['delivery', 'state', 'attempts', 'last attempt', 'dead reason', 'waiting on', 'first seen', 'next attempt'],
      items.map((d) => h('tr', { dataset: { deliveryId: d.id, state: d.state } },
        h('td', { class: 'id' }, deliveryLink(d.id)),
        h('td', null, badge(d.state)),
        h('td', { class: 'num' }, num(d.attempts)),
        h('td', { class: 'last-attempt' }, attemptSummary((d.attempt_history || []).at(-1))),
        h('td', null, val(d.dead_reason)),
        h('td', null, val(d.waiting_on)),
        h('td', null, when(d.first_seen)),
        h('td', null, when(d.next_attempt_at)))),
      'no deliveries');
  }

  // "retryable 503 · 120 ms", or the transport error; each attempt's whole story is on the
  // delivery's page.
  function attemptSummary(a) {
    if (!a) return none();
    const status = a.status == null ? (a.error || '') : String(a.status);
    return h('span', null, badge(a.outcome), ` ${status}`, a.duration_ms == null ? '' : ` · ${a.duration_ms} ms`);
  }

  // ---------------------------------------------------------------- events

  // The event search: newest first, by type, type prefix and time (`since` at or after,
  // `until` before), a page at a time. The filter lives in the address, so a search can be
  // linked and reloaded.
  async function pageEvents(params, seq = app.seq) {
    const filter = {};
    for (const key of ['type', 'type_prefix', 'since', 'until']) filter[key] = params.get(key) || '';
    const box = h('div');
    const more = h('button', { id: 'events-more', type: 'button', hidden: true }, 'Load older');
    let items = [];
    let cursor = null;
    async function load() {
      const page = await get(`/v1/events${query(Object.assign({ limit: 100, cursor }, filter))}`);
      items = items.concat(page.items);
      cursor = page.next_cursor;
      box.replaceChildren(eventsTable(items));
      more.hidden = !cursor;
    }
    more.addEventListener('click', () => busy('events', seq, load));
    await load();
    const inputs = {};
    const form = h('form', { id: 'events-search', class: 'filter-bar' },
      ['type', 'type_prefix', 'since', 'until'].map((key) => {
        inputs[key] = h('input', { id: `events-${key}`, name: key, value: filter[key], spellcheck: 'false',
          placeholder: { type: 'shipment.delivered', type_prefix: 'shipment.', since: '2026-12-05T09:00:00Z', until: 'RFC 3339, UTC' }[key] });
        return [h('label', { for: `events-${key}` }, key.replace('_', ' ')), inputs[key]];
      }),
      h('button', { type: 'submit', class: 'primary' }, 'Search'),
      Object.values(filter).some(Boolean) ? link('#/events', 'clear', 'events-clear') : null);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const next = {};
      for (const [key, input] of Object.entries(inputs)) next[key] = input.value.trim();
      go(to.events(next));
    });
    return h('div', { id: 'events-page' },
      h('div', { class: 'page-head' }, h('h1', null, 'Events'), h('span', { class: 'muted' }, 'newest first')),
      card(null, form, box, h('div', { class: 'actions' }, more)));
  }

  function eventsTable(items) {
    return table({ id: 'events' }, ['event', 'type', 'accepted', 'deliveries', 'delivered', 'dead', 'pending'],
      items.map((e) => {
        const c = e.counts || {};
        return h('tr', { dataset: { eventId: e.id } },
          h('td', { class: 'id' }, link(to.event(e.id), e.id, 'event-link')),
          h('td', null, e.type),
          h('td', null, when(e.accepted_at)),
          h('td', { class: 'num' }, num(e.deliveries)),
          h('td', { class: 'num' }, num(c.delivered)),
          h('td', { class: 'num' }, num(c.dead)),
          h('td', { class: 'num' }, num((c.scheduled || 0) + (c.in_flight || 0))));
      }),
      'no events match');
  }

  async function pageEvent(id) {
    const [e, deliveries] = await Promise.all([
      get(`/v1/events/${enc(id)}`),
      get(`/v1/deliveries${query({ event_id: id, limit: 100 })}`),
    ]);
    const c = e.counts || {};
    return h('div', { id: 'event', dataset: { eventId: e.id } },
      h('div', { class: 'crumbs' }, link('#/events', 'Events'), ' /'),
      h('div', { class: 'page-head' }, h('h1', null, 'Event ', h('code', null, e.id))),
      card('Event', fields([
        ['type', link(to.events({ type: e.type }), e.type, 'event-type-link')],
        ['tenant', val(e.tenant_id)],
        ['ordering key', val(e.ordering_key)],
        ['accepted', when(e.accepted_at)],
        ['payload version', num(e.payload_version)],
        ['deliveries', `${num(e.deliveries)}: ${num(c.delivered)} delivered, ${num(c.dead)} dead, ${num((c.scheduled || 0) + (c.in_flight || 0))} pending`],
      ])),
      card('Payload', h('pre', { id: 'event-payload', class: 'body' }, JSON.stringify(e.payload, null, 2))),
      card(deliveries.next_cursor ? 'Deliveries (the first 100)' : 'Deliveries', deliveriesTable(deliveries.items)));
  }

  // ---------------------------------------------------------------- delivery

  async function pageDelivery(id) {
    const d = await get(`/v1/deliveries/${enc(id)}`);
    const refresh = h('button', { id: 'delivery-refresh', type: 'button' }, 'Refresh');
    refresh.addEventListener('click', () => render('delivery', () => pageDelivery(id), true));
    return h('div', { id: 'delivery', dataset: { deliveryId: d.id } },
      h('div', { class: 'crumbs' }, link('#/subscribers', NOUN.Many), ' / ', subscriberLink(d.subscriber_id), ' /'),
      h('div', { class: 'page-head' }, h('h1', null, 'Delivery ', h('code', null, d.id)),
        h('span', { id: 'delivery-state', class: `badge b-${d.state}` }, d.state), refresh),
      d.state === 'dead' && d.dead_reason
        ? h('p', null, link(to.deadLetters({ reason: d.dead_reason, subscriber_id: d.subscriber_id }), 'replay dead letters like this →', 'replay-like-this'))
        : null,
      card('Delivery', fields([
        ['id', h('code', null, d.id)],
        ['event', PORTAL ? h('code', null, d.event_id) : link(to.event(d.event_id), d.event_id, 'event-link')],
        [NOUN.one, subscriberLink(d.subscriber_id)],
        ['state', badge(d.state)],
        ['attempts', num(d.attempts)],
        ['first seen', when(d.first_seen)],
        ['window start', when(d.window_start)],
        ['next attempt', when(d.next_attempt_at)],
        ['waiting on', val(d.waiting_on)],
        ['dead reason', val(d.dead_reason)],
        ['dead at', when(d.dead_at)],
        ['error', d.error ? h('code', null, d.error) : none()],
        ['payload version', val(d.payload_version)],
        ['policy', val(d.policy)],
      ])),
      card('Attempts', attemptsTable(d.attempt_history || [])));
  }

  function attemptsTable(history) {
    return table({ id: 'attempts' }, ['#', 'started', 'outcome', 'status', 'duration', 'policy', 'error', 'answer body'],
      history.map((a) => h('tr', { class: 'attempt', dataset: { ordinal: a.ordinal } },
        h('td', { class: 'attempt-ordinal num' }, String(a.ordinal)),
        h('td', { class: 'attempt-started' }, when(a.started_at)),
        h('td', { class: 'attempt-outcome' }, badge(a.outcome)),
        h('td', { class: 'attempt-status num' }, a.status == null ? '' : String(a.status)),
        h('td', { class: 'attempt-duration num' }, a.duration_ms == null ? '' : `${a.duration_ms} ms`),
        h('td', { class: 'attempt-policy' }, a.policy || ''),
        h('td', { class: 'attempt-error wrap' }, a.error || ''),
        h('td', { class: 'attempt-body' }, a.response_body == null ? '' : h('pre', { class: 'body' }, a.response_body)))),
      'no attempt yet');
  }

  // ---------------------------------------------------------------- dead letters and replay

  async function pageDeadLetters(params, seq = app.seq) {
    const filter = { reason: params.get('reason') || '', subscriber_id: params.get('subscriber_id') || '' };
    const groupsBox = h('div');
    const listBox = h('div');
    const more = h('button', { id: 'dead-letters-more', type: 'button', hidden: true }, 'load more');
    let letters = [];
    let next = null;
    let form = null;

    async function loadGroups() {
      const groups = (await get('/v1/dead-letters/groups')).items || [];
      groupsBox.replaceChildren(groupsTable(groups, (g) => form && form.fill(g.reason, g.subscriber_id)));
      if (form) form.addReasons(groups.map((g) => g.reason));
      return groups;
    }

    async function loadLetters(cursor) {
      const page = await get(`/v1/dead-letters${query(Object.assign({ limit: 100, cursor }, filter))}`);
      letters = cursor ? letters.concat(page.items) : page.items;
      next = page.next_cursor;
      listBox.replaceChildren(deadLettersTable(letters));
      more.hidden = !next;
    }

    more.addEventListener('click', () => busy('dead-letters', seq, () => loadLetters(next)));
    const [groups] = await Promise.all([loadGroups(), loadLetters()]);

    if (app.canWrite) {
      const reasons = REPLAY_REASONS.concat(groups.map((g) => g.reason), filter.reason ? [filter.reason] : []);
      form = replayForm(reasons, filter, seq, async () => {
        await Promise.all([loadGroups(), loadLetters()]);
      });
    }

    const described = [filter.reason && `reason ${filter.reason}`, filter.subscriber_id && `${NOUN.one} ${filter.subscriber_id}`].filter(Boolean);
    return h('div', { id: 'dead-letters-page' },
      h('div', { class: 'page-head' }, h('h1', null, 'Dead letters')),
      card('Groups (largest first)', groupsBox),
      card(null,
        h('div', { class: 'filter-bar' }, h('h2', null, 'Dead letters (oldest first)'),
          h('span', { id: 'dead-letters-filter', class: 'muted' }, described.length ? `filtered by ${described.join(', ')}` : `all reasons, all ${NOUN.many}`),
          described.length ? link('#/dead-letters', 'clear filter') : null),
        listBox, h('div', { class: 'actions' }, more)),
      form ? form.node : null);
  }

  function groupsTable(groups, onReplay) {
    const headers = ['reason', NOUN.one, 'count', 'oldest', 'newest'].concat(app.canWrite ? [''] : []);
    return table({ id: 'dead-groups' }, headers,
      groups.map((g) => h('tr', { class: 'dead-group', dataset: { reason: g.reason, subscriberId: g.subscriber_id } },
        h('td', null, link(to.deadLetters({ reason: g.reason, subscriber_id: g.subscriber_id }), g.reason, 'group-filter')),
        h('td', { class: 'id' }, subscriberLink(g.subscriber_id)),
        h('td', { class: 'num' }, num(g.count)),
        h('td', null, when(g.oldest_dead_at)),
        h('td', null, when(g.newest_dead_at)),
        // A revoked subscriber receives nothing: its dead letters are no replay's.
        app.canWrite ? h('td', null, g.subscriber_status === 'revoked'
          ? h('span', { class: 'muted' }, 'revoked')
          : h('button', { type: 'button', class: 'replay-group', onclick: () => onReplay(g) }, 'Replay…')) : null)),
      'no dead letters');
  }

  function deadLettersTable(items) {
    return table({ id: 'dead-letters' }, ['delivery', 'event type', NOUN.one, 'reason', 'error', 'dead at', 'last status', 'attempts'],
      items.map((l) => {
        const history = l.attempt_history || [];
        const last = history[history.length - 1];
        return h('tr', { dataset: { deliveryId: l.delivery_id, reason: l.reason } },
          h('td', { class: 'id' }, deliveryLink(l.delivery_id)),
          h('td', null, val(l.event_type)),
          h('td', { class: 'id' }, subscriberLink(l.subscriber_id)),
          h('td', null, l.reason),
          h('td', { class: 'wrap' }, val(l.error)),
          h('td', null, when(l.dead_at)),
          h('td', { class: 'last-status' }, last && last.status != null ? String(last.status) : ''),
          h('td', { class: 'num' }, num(history.length)));
      }),
      'no dead letters match');
  }

  // The replay form: preview (dry run) first; confirm releases exactly what was previewed and is
  // enabled only while the form is unchanged since that preview.
  function replayForm(reasons, preset, seq, afterRelease) {
    const reason = h('select', { id: 'replay-reason' });
    const subscriber = h('input', { id: 'replay-subscriber', type: 'text', placeholder: `any ${NOUN.one}`, spellcheck: 'false', autocomplete: 'off', value: preset.subscriber_id || null });
    const limit = h('input', { id: 'replay-limit', type: 'number', min: 1, max: 1000, step: 1, value: 100 });
    const pace = h('input', { id: 'replay-per-second', type: 'number', min: 0, step: 'any', placeholder: 'unpaced' });
    const preview = h('button', { id: 'replay-preview', type: 'submit', class: 'primary' }, 'Preview');
    const confirm = h('button', { id: 'replay-confirm', type: 'button', class: 'danger', disabled: true }, 'Release');
    const previewBox = h('div', { id: 'replay-preview-result', hidden: true });
    const resultBox = h('div', { id: 'replay-result', hidden: true });
    let previewed = null; // the body of the preview shown, if it is still valid

    function addReasons(list) {
      const have = new Set([...reason.options].map((o) => o.value));
      for (const r of list) if (r && !have.has(r)) { reason.append(h('option', { value: r }, r)); have.add(r); }
    }
    addReasons(reasons);
    if (preset.reason) reason.value = preset.reason;

    function invalidate() {
      previewed = null;
      confirm.disabled = true;
      confirm.textContent = 'Release';
      previewBox.hidden = true;
      previewBox.replaceChildren();
    }

    // The request body from the inputs; numbers as numbers, empty optionals left out.
    function body() {
      const n = Number(limit.value);
      if (!limit.value || !Number.isInteger(n) || n < 1 || n > 1000) throw new ApiError(0, 'invalid', 'limit must be a whole number from 1 to 1000');
      const out = { reason: reason.value, limit: n };
      if (subscriber.value.trim()) out.subscriber_id = subscriber.value.trim();
      if (pace.value.trim() !== '') {
        const p = Number(pace.value);
        if (!Number.isFinite(p) || p <= 0) throw new ApiError(0, 'invalid', 'per second must be a positive number, or empty for no pacing');
        out.per_second = p;
      }
      return out;
    }

    // novalidate: body() checks the inputs and says what is wrong in the flash.
    const form = h('form', { id: 'replay-form', class: 'card', autocomplete: 'off', novalidate: true },
      h('h2', null, 'Replay dead letters'),
      h('p', { class: 'hint' }, 'Preview shows what a replay would release now; confirm releases those dead letters to be delivered again. Replays are audited.'),
      h('div', { class: 'form-grid' },
        h('label', { for: 'replay-reason' }, 'reason'), reason,
        h('label', { for: 'replay-subscriber' }, NOUN.one), subscriber,
        h('label', { for: 'replay-limit' }, 'limit (1–1000)'), limit,
        h('label', { for: 'replay-per-second' }, 'pace per second'), pace),
      h('div', { class: 'actions' }, preview, confirm),
      previewBox, resultBox);

    form.addEventListener('input', invalidate);
    form.addEventListener('change', invalidate);
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy('dead-letters', seq, async () => {
        invalidate();
        const req = body();
        const answer = await send('POST', '/v1/dead-letters/replay', Object.assign({}, req, { dry_run: true }));
        const ids = answer.delivery_ids || [];
        // append() skips the missing list; replaceChildren would print a null as "null".
        previewBox.replaceChildren();
        append(previewBox, [
          h('p', null, 'A replay would release ', h('strong', { id: 'replay-selected' }, String(answer.selected)), ` dead letter${answer.selected === 1 ? '' : 's'}.`),
          ids.length ? h('ul', { class: 'id-list' }, ids.map((id) => h('li', { dataset: { deliveryId: id } }, deliveryLink(id)))) : null]);
        previewBox.hidden = false;
        // Confirm releases exactly these or nothing (409: preview again).
        previewed = Object.assign({}, req, { expected_delivery_ids: ids });
        // Nothing selected: nothing to release (an empty replay would only add an audit row).
        confirm.disabled = answer.selected === 0;
        confirm.textContent = `Release ${answer.selected}`;
      });
    });

    confirm.addEventListener('click', () => {
      if (!previewed) return;
      const req = previewed;
      busy('dead-letters', seq, async () => {
        confirm.disabled = true;
        let answer;
        try {
          answer = await send('POST', '/v1/dead-letters/replay', req);
        } catch (err) {
          // 409: the selection changed since the preview; it is stale now. Otherwise the same
          // preview may be tried again.
          if (err instanceof ApiError && err.status === 409) invalidate();
          else confirm.disabled = false;
          throw err;
        }
        invalidate();
        resultBox.replaceChildren(h('p', null, 'replay ', link(to.replay(answer.replay_id), answer.replay_id, 'replay-link'),
          ` released ${answer.selected} deliveries`));
        resultBox.hidden = false;
        ok(`replay ${answer.replay_id} released ${answer.selected} deliveries`);
        await afterRelease();
      });
    });

    function fill(r, sub) {
      addReasons([r]);
      reason.value = r;
      subscriber.value = sub || '';
      invalidate();
      form.scrollIntoView({ block: 'nearest' });
      limit.focus();
    }

    return { node: form, fill, addReasons };
  }

  // ---------------------------------------------------------------- replays

  async function pageReplays(seq) {
    // Newest first, a page at a time: the audit can be long.
    const box = h('div');
    const more = h('button', { id: 'replays-more', type: 'button', hidden: true }, 'Load older');
    let items = [];
    let cursor = null;
    async function load() {
      const page = await get(`/v1/replays${query({ order: 'newest', limit: 100, cursor })}`);
      items = items.concat(page.items);
      cursor = page.next_cursor;
      box.replaceChildren(replaysTable(items));
      more.hidden = !cursor;
    }
    more.addEventListener('click', () => busy('replays', seq, load));
    await load();
    return h('div', { id: 'replays' },
      h('div', { class: 'page-head' }, h('h1', null, 'Replays'), h('span', { class: 'muted' }, 'newest first')),
      box, h('div', { class: 'actions' }, more));
  }

  function replaysTable(items) {
    return table({ id: 'replays-table' }, ['replay', 'created', 'filter', 'limit', 'pace', 'requested by', 'selected', 'delivered', 'dead', 'other'],
        items.map((r) => h('tr', { dataset: { replayId: r.id } },
          h('td', { class: 'id' }, link(to.replay(r.id), r.id, 'replay-link')),
          h('td', null, when(r.created_at)),
          h('td', null, filterText(r.filter)),
          h('td', { class: 'num' }, num(r.limit)),
          h('td', null, pace(r.per_second)),
          h('td', null, val(r.requested_by)),
          h('td', { class: 'num' }, num(r.selected)),
          h('td', { class: 'num' }, num(r.delivered)),
          h('td', { class: 'num' }, num(r.dead)),
          h('td', { class: 'num' }, num(pending(r))))),
        'no replays yet');
  }

  const pace = (perSecond) => (perSecond == null ? 'unpaced' : `${num(perSecond)} /s`);
  // Neither delivered nor dead since this replay: still pending, or replayed again later (a
  // later replay counts its outcome).
  const pending = (r) => Math.max(0, (r.selected || 0) - (r.delivered || 0) - (r.dead || 0));

  function filterText(f) {
    f = f || {};
    return h('span', null, f.reason || '', f.subscriber_id ? [' · ', subscriberLink(f.subscriber_id)] : h('span', { class: 'muted' }, ` · any ${NOUN.one}`));
  }

  async function pageReplay(id) {
    const r = await get(`/v1/replays/${enc(id)}`);
    const ids = r.delivery_ids || [];
    return h('div', { id: 'replay', dataset: { replayId: r.id } },
      h('div', { class: 'crumbs' }, link('#/replays', 'Replays'), ' /'),
      h('div', { class: 'page-head' }, h('h1', null, 'Replay ', h('code', null, r.id))),
      card('Replay', fields([
        ['id', h('code', null, r.id)],
        ['created', when(r.created_at)],
        ['reason', val((r.filter || {}).reason)],
        [NOUN.one, subscriberLink((r.filter || {}).subscriber_id)],
        ['limit', num(r.limit)],
        ['pace', pace(r.per_second)],
        ['requested by', val(r.requested_by)],
        ['selected', num(r.selected)],
        ['delivered', num(r.delivered)],
        ['dead again', num(r.dead)],
        ['pending or replayed again', num(pending(r))],
      ])),
      card(`Deliveries released (${ids.length})`,
        ids.length
          ? h('ul', { class: 'id-list', id: 'replay-deliveries' }, ids.map((d) => h('li', { dataset: { deliveryId: d } }, deliveryLink(d))))
          : h('p', { class: 'muted' }, 'none')));
  }

  // ---------------------------------------------------------------- event types

  // The catalog, read-only here (it is changed through the API): each type's description, the
  // payload versions it has a schema for, and whether it is deprecated.
  async function pageEventTypes(seq) {
    const box = h('div');
    const more = h('button', { id: 'event-types-more', type: 'button', hidden: true }, 'load more');
    let items = [];
    let cursor = null;
    async function load() {
      const page = await get(`/v1/event-types${query({ limit: 200, cursor })}`);
      items = items.concat(page.items);
      cursor = page.next_cursor;
      box.replaceChildren(eventTypesTable(items));
      more.hidden = !cursor;
    }
    more.addEventListener('click', () => busy('event-types', seq, load));
    await load();
    return h('div', { id: 'event-types' },
      h('div', { class: 'page-head' }, h('h1', null, 'Event types'), h('span', { class: 'muted' }, 'in the order they were registered')),
      box, h('div', { class: 'actions' }, more));
  }

  const schemaVersions = (t) => Object.keys(t.schemas || {}).map(Number).sort((a, b) => a - b);

  function eventTypesTable(items) {
    return table({ id: 'event-types-table' }, ['event type', 'description', 'schema versions', 'deprecated', 'updated'],
      items.map((t) => h('tr', { dataset: { eventType: t.name } },
        h('td', { class: 'id' }, link(to.eventType(t.name), t.name, 'event-type-link')),
        h('td', { class: 'wrap' }, val(t.description)),
        h('td', { class: 'versions' }, schemaVersions(t).length ? schemaVersions(t).join(', ') : none()),
        h('td', null, t.deprecated ? badge('deprecated') : h('span', { class: 'muted' }, 'no')),
        h('td', null, when(t.updated_at)))),
      'no event types registered: POST /v1/event-types registers one');
  }

  async function pageEventType(name) {
    const t = await get(`/v1/event-types/${enc(name)}`);
    const versions = schemaVersions(t);
    return h('div', { id: 'event-type', dataset: { eventType: t.name } },
      h('div', { class: 'crumbs' }, link('#/event-types', 'Event types'), ' /'),
      h('div', { class: 'page-head' }, h('h1', null, h('code', null, t.name)), t.deprecated ? badge('deprecated') : null),
      card('Event type', fields([
        ['name', h('code', null, t.name)],
        ['description', val(t.description)],
        ['deprecated', t.deprecated ? badge('deprecated') : 'no'],
        ['revision', num(t.revision)],
        ['registered', when(t.created_at)],
        ['registered by', val(t.created_by)],
        ['updated', when(t.updated_at)],
      ])),
      versions.length
        ? versions.map((v) => card(`Schema of payload version ${v}`,
          h('pre', { class: 'schema', dataset: { version: String(v) } }, JSON.stringify(t.schemas[String(v)], null, 2))))
        : card('Schemas', h('p', { class: 'muted' }, 'No schema: its payloads are not checked.')));
  }

  // ---------------------------------------------------------------- drill

  // The chart is a file from a directory, so it is rebuilt rather than trusted: only drawing
  // elements and presentation attributes are copied into an inline <svg>, nothing that runs,
  // links or loads. (Shown as an image from a blob it could be opened as a page of this
  // origin, scripts and all.)
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const SVG_ELEMENTS = new Set(['svg', 'g', 'line', 'polyline', 'polygon', 'path', 'rect', 'circle', 'ellipse', 'text', 'tspan', 'title']);
  const SVG_ATTRIBUTES = new Set(['width', 'height', 'viewBox', 'x', 'y', 'x1', 'y1', 'x2', 'y2', 'cx', 'cy', 'r', 'rx', 'ry',
    'points', 'd', 'fill', 'stroke', 'stroke-width', 'stroke-dasharray', 'opacity', 'fill-opacity', 'stroke-opacity',
    'font-size', 'font-family', 'text-anchor', 'dominant-baseline', 'transform']);

  function safeSvg(text) {
    const parsed = new DOMParser().parseFromString(text, 'image/svg+xml');
    const root = parsed.documentElement;
    if (!root || root.localName !== 'svg' || root.namespaceURI !== SVG_NS) throw new ApiError(0, 'bad_chart', 'the drill chart is not an SVG drawing');
    const copy = (node) => {
      if (node.nodeType === Node.TEXT_NODE) return document.createTextNode(node.textContent);
      if (node.nodeType !== Node.ELEMENT_NODE || node.namespaceURI !== SVG_NS || !SVG_ELEMENTS.has(node.localName)) return null;
      const el = document.createElementNS(SVG_NS, node.localName);
      for (const attr of node.attributes) {
        // Values are drawing numbers and colours; anything naming a URL is dropped.
        if (SVG_ATTRIBUTES.has(attr.name) && !/url\s*\(|javascript:/i.test(attr.value)) el.setAttribute(attr.name, attr.value);
      }
      for (const child of node.childNodes) {
        const c = copy(child);
        if (c) el.append(c);
      }
      return el;
    };
    const svg = copy(root);
    svg.setAttribute('id', 'drill-chart');
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', 'drill latency chart');
    return svg;
  }

  const STAT_KEYS = ['n', 'p50_ms', 'p95_ms', 'p99_ms'];

  async function pageDrill() {
    let latest;
    try {
      latest = await get('/v1/drill/latest');
    } catch (err) {
      // No report yet is the normal state of a fresh install, not an error.
      if (err instanceof ApiError && err.status === 404) {
        return h('div', { id: 'drill' }, h('div', { class: 'page-head' }, h('h1', null, 'Drill')),
          card('No drill report', h('p', null, 'No drill report: run ',
            h('code', null, 'hookline drill --json drill.json --svg drill.svg'),
            ' in the directory the configuration\'s ', h('code', null, 'console.drill_reports'),
            ' names (by default, where hookline runs).')));
      }
      throw err;
    }
    const rep = latest.report || {};
    let chart = null;
    if (latest.chart) {
      try {
        chart = safeSvg(await request('GET', '/v1/drill/latest/chart', undefined, 'text'));
      } catch (err) {
        report(err);
        chart = errorPanel(err);
      }
    }
    return h('div', { id: 'drill' },
      h('div', { class: 'page-head' }, h('h1', null, 'Drill'),
        h('span', { class: 'muted' }, h('code', null, latest.file), ' modified ', when(latest.modified_at))),
      h('div', { id: 'drill-verdict', class: `banner ${rep.passed ? 'pass' : 'fail'}` }, rep.passed ? 'PASS' : 'FAIL'),
      card('Checks', h('ul', { id: 'drill-checks', class: 'checks' }, (rep.checks || []).map((c) =>
        h('li', { class: c.passed ? 'pass' : 'fail' }, badge(c.passed ? 'pass' : 'fail'), c.check)))),
      card('Phases', drillPhases(rep.phases || {})),
      chart ? card('Chart', chart) : null);
  }

  // Walks the phases object generically: any object with p50_ms is a latency row; other scalar
  // fields are shown as "key: value" on the row of the object that holds them.
  function drillPhases(phases) {
    const rows = [];
    (function walk(obj, path) {
      const scalars = [];
      const nested = [];
      for (const [k, v] of Object.entries(obj)) {
        if (v && typeof v === 'object' && !Array.isArray(v)) nested.push([k, v]);
        else scalars.push([k, v]);
      }
      const isStat = 'p50_ms' in obj;
      const extras = scalars.filter(([k]) => !isStat || !STAT_KEYS.includes(k));
      if (isStat || (extras.length && path.length)) rows.push({ path, stats: isStat ? obj : null, extras });
      for (const [k, v] of nested) walk(v, path.concat(k));
    })(phases, []);
    const cell = (v) => h('td', { class: 'num' }, v == null ? '' : num(v, 1));
    return table({ id: 'drill-phases' }, ['phase', 'who', 'n', 'p50 ms', 'p95 ms', 'p99 ms', 'other'],
      rows.map((r) => h('tr', { class: 'drill-row', dataset: { phase: r.path[0] || '', who: r.path.slice(1).join('/') } },
        h('td', null, r.path[0] || ''),
        h('td', null, r.path.slice(1).join(' / ')),
        cell(r.stats && r.stats.n), cell(r.stats && r.stats.p50_ms), cell(r.stats && r.stats.p95_ms), cell(r.stats && r.stats.p99_ms),
        h('td', { class: 'muted' }, r.extras.map(([k, v]) => `${k}: ${typeof v === 'object' && v !== null ? JSON.stringify(v) : typeof v === 'number' ? num(v) : String(v)}`).join(', ')))),
      'the report has no phases');
  }

  // ---------------------------------------------------------------- start

  function main() {
    view = $('#view');
    if (PORTAL) takeTokenFromLink();
    else setupToken();
    window.addEventListener('hashchange', () => {
      clearFlash(); // a message belongs to the page it was shown on
      window.scrollTo(0, 0);
      // A new portal link opened in this tab, or no whoami answer yet (a 401 or an unreachable
      // server): ask again first.
      if ((PORTAL && takeTokenFromLink()) || !app.who) start();
      else route();
    });
    start();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
})();
