// The coven-codex web page. Every message is keyed by its journal entry id and the live channel
// resumes from the last journal position this tab has, so nothing is shown twice or skipped.
// Text from users and the model is set with textContent; the only HTML inserted is `html`,
// which the server rendered from Markdown with raw HTML disabled.
//
// Login (no cookie: cookies are not scoped by port, every server on 127.0.0.1 would get one):
// the printed address carries ?token=, which this script reads and drops from the address bar at
// once. The live channel answers the server's challenge with it and gets a device key, which is
// imported as a non-extractable WebCrypto key and kept in IndexedDB (this origin only, port
// included). A reload or another tab answers the challenge with that key (HMAC of the nonce):
// script can use the key, never read it. Where WebCrypto is not available (plain HTTP on a name
// that is not loopback) the token is kept in this tab's memory only. Uploads and images go with
// the channel's session value as an Authorization header; images are shown as blob: URLs.
'use strict';

const $ = (id) => document.getElementById(id);
const state = {
  conversation: null,  // shown conversation
  after: null,         // journal position after the last entry of it this tab has
  socket: null,
  retry: 0,
  sender: '',
  names: [],
  running: false,
  turnStarted: null,   // when the running turn started (ms since the epoch, from its journal entry)
  ticker: null,        // the once-a-second timer of the elapsed time while a turn runs
  streams: new Map(),  // stream key (its first delta's id) -> {node, body, text, ids}
  pending: [],         // uploaded images waiting to be sent: {name, url}
  token: null,         // the access token of the printed address, until a device key is kept
  session: null,       // the live channel's session value (uploads, images)
  refused: false,      // the login was refused: do not reconnect
  waiting: [],         // image loads waiting for a session
};

const DEVICE_DB = 'coven-web';
const DEVICE_STORE = 'device';
const canKeepKey = Boolean(window.isSecureContext && window.crypto && crypto.subtle && window.indexedDB);

function takeTokenFromAddress() {
  const params = new URLSearchParams(location.search);
  const token = params.get('token');
  if (token === null) return;
  state.token = token;
  history.replaceState(null, '', `/${location.hash}`);  // the token leaves the address bar
}

function deviceDb() {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(DEVICE_DB, 1);
    request.onupgradeneeded = () => request.result.createObjectStore(DEVICE_STORE);
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

async function deviceDo(mode, action) {
  const db = await deviceDb();
  try {
    return await new Promise((resolve, reject) => {
      const request = action(db.transaction(DEVICE_STORE, mode).objectStore(DEVICE_STORE));
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
  } finally {
    db.close();
  }
}

async function loadDevice() {
  if (!canKeepKey) return null;
  try { return (await deviceDo('readonly', (store) => store.get(location.port || 'default'))) || null; } catch (e) { return null; }
}

async function keepDevice(device) {
  const raw = Uint8Array.from(atob(device.secret.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
  const key = await crypto.subtle.importKey('raw', raw, {name: 'HMAC', hash: 'SHA-256'}, false, ['sign']);
  await deviceDo('readwrite', (store) => store.put({id: device.id, key}, location.port || 'default'));
}

async function forgetDevice() {
  if (!canKeepKey) return;
  try { await deviceDo('readwrite', (store) => store.delete(location.port || 'default')); } catch (e) { /* nothing kept */ }
}

function base64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

async function answerChallenge(socket, nonce) {
  if (state.token !== null) {
    socket.send(JSON.stringify({type: 'login', token: state.token, device: canKeepKey}));
    return;
  }
  const device = await loadDevice();
  if (device) {
    const label = new TextEncoder().encode('coven-web-live\0' + nonce);
    const proof = base64url(await crypto.subtle.sign('HMAC', device.key, label));
    socket.send(JSON.stringify({type: 'authenticate', device: device.id, proof}));
    return;
  }
  state.refused = true;
  notice('This page needs its access token. Open the address that `coven-codex web` printed when it started (it ends with ?token=...).');
  socket.close();
}

function authorized() {
  return state.session ? {Authorization: `Bearer ${state.session}`} : {};
}

function showImage(image, url) {
  // <img src> cannot carry the session: fetch the image with it and show it as a blob: URL.
  const load = async () => {
    const response = await fetch(url, {headers: authorized()});
    if (response.status === 401) { state.waiting.push(load); return; }
    if (!response.ok) return;
    image.src = URL.createObjectURL(await response.blob());
  };
  if (state.session) load().catch(() => state.waiting.push(load));
  else state.waiting.push(load);
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function conversationFromHash() {
  const match = /^#c=(.+)$/.exec(location.hash);
  if (!match) return null;
  try { return decodeURIComponent(match[1]); } catch (e) { return null; }
}

function send(message) {
  if (state.socket && state.socket.readyState === WebSocket.OPEN) {
    state.socket.send(JSON.stringify(message));
    return true;
  }
  notice('not connected: the page reconnects by itself; try again in a moment');
  return false;
}

function notice(text) {
  const box = $('notice');
  box.textContent = text;
  box.hidden = !text;
}

function connect() {
  // wss: when the page came over https (behind a TLS-terminating reverse proxy), else ws:
  const socket = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/live`);
  let loggedIn = false;
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (loggedIn) { receive(message); return; }
    if (message.type === 'challenge') {
      answerChallenge(socket, message.nonce).catch(() => socket.close());
    } else if (message.type === 'refused') {
      state.refused = true;
      if (state.token === null) forgetDevice();
      state.token = null;
      notice(message.text);
    } else if (message.type === 'hello') {
      loggedIn = true;
      loggedInAs(socket, message);
    }
  };
  socket.onclose = () => {
    if (state.socket !== socket && state.socket !== null) return;
    state.socket = null;
    state.session = null;
    if (state.refused) {
      $('connection').textContent = 'not logged in';
      $('connection').className = 'connection';
      return;
    }
    $('connection').textContent = 'reconnecting…';
    $('connection').className = 'connection';
    const delay = Math.min(5000, 200 * 2 ** state.retry);
    state.retry = Math.min(state.retry + 1, 5);
    setTimeout(connect, delay);
  };
}

function loggedInAs(socket, hello) {
  state.socket = socket;
  state.session = hello.session;
  state.retry = 0;
  if (hello.device) keepDevice(hello.device).then(() => { state.token = null; }).catch(() => {});
  $('connection').textContent = 'connected';
  $('connection').className = 'connection live';
  const waiting = state.waiting.splice(0);
  for (const load of waiting) load().catch(() => state.waiting.push(load));
  const resume = state.conversation !== null;  // a reconnect: go on from the last entry this tab has
  receive(hello);
  if (resume) subscribe(false);
}

function subscribe(fresh) {
  if (fresh) {
    state.after = null;
    state.running = false;
    state.streams.clear();
    $('messages').replaceChildren();
    updateTurn();
  }
  send({type: 'subscribe', conversation: state.conversation, after: state.after});
}

function receive(message) {
  switch (message.type) {
    case 'hello':
      state.sender = message.sender;
      showConversations(message.conversations);
      if (state.conversation === null) {
        open(conversationFromHash() || message.conversations[0] || 'default');
      }
      break;
    case 'conversations':
      showConversations(message.conversations);
      break;
    case 'entries':
      if (message.conversation !== state.conversation) return;
      for (const entry of message.entries) {
        if (state.after === null || entry.end > state.after) state.after = entry.end;
        add(entry);
      }
      if (message.entries.length) scrollDown();
      break;
    case 'notice':
      notice(message.text);
      break;
  }
}

function showConversations(names) {
  state.names = names.slice();
  if (state.conversation !== null && !state.names.includes(state.conversation)) state.names.unshift(state.conversation);
  const list = $('conversations');
  list.replaceChildren();
  for (const name of state.names) {
    const item = el('li');
    const button = el('button', name === state.conversation ? 'current' : '', name);
    button.type = 'button';
    button.dataset.conversation = name;
    button.addEventListener('click', () => open(name));
    item.append(button);
    list.append(item);
  }
}

function showMenu(shown) {
  document.body.classList.toggle('menu-open', shown);
  $('menu').setAttribute('aria-expanded', String(shown));
}

function open(name) {
  showMenu(false);
  if (name === state.conversation) return;
  state.conversation = name;
  history.replaceState(null, '', `#c=${encodeURIComponent(name)}`);
  $('title').textContent = name;
  notice('');
  showConversations(state.names);
  subscribe(true);
}

function scrollDown() {
  const box = $('messages');
  box.scrollTop = box.scrollHeight;
}

function who(entry) {
  return el('div', 'who', `${entry.sender} · ${entry.ts.slice(11, 19)}`);
}

function add(entry) {
  if (document.getElementById(`m-${entry.id}`)) return;  // already on the page
  // How deltas, replies and turn ends fold together is decided on the server by the adapter
  // kit's stream logic (the same as every chat's): a delta names its stream, a reply the stream it
  // replaces, a turn's end the streams it closes. The page only applies that.
  if (entry.kind === 'delta') { streamDelta(entry); return; }
  if (entry.replaces) dropStream(entry.replaces);
  for (const key of entry.closes || []) endStream(key);
  if (entry.kind === 'status') trackTurn(entry.state, entry.ts);
  if (entry.kind === 'approval') markAnswered(entry);
  const node = build(entry);
  node.id = `m-${entry.id}`;
  node.dataset.kind = entry.kind;
  if (STEP_KINDS.has(entry.kind)) { addStep(node, entry); return; }
  $('messages').append(node);
}

// A turn's steps (tool calls, their results, activities) in one folded group, as the chats' progress
// card: "31 steps · $ pytest -q"; opened, every call and result. A reply or a status line after them
// ends the group; the next step starts another.
const STEP_KINDS = new Set(['tool_call', 'tool_result', 'activity']);

function addStep(node, entry) {
  const box = $('messages');
  let group = box.lastElementChild;
  if (!group || !group.classList.contains('steps')) {
    group = el('details', 'msg steps');
    group.append(el('summary', '', ''));
    box.append(group);
  }
  group.append(node);
  const count = group.querySelectorAll('.tool_call, .activity').length;
  const line = ` · ${entry.text.split('\n')[0].slice(0, 100)}`;
  if (count && entry.kind !== 'tool_result') {
    group.firstChild.textContent = `${count} step${count === 1 ? '' : 's'}${line}`;
  } else if (!count) {  // results whose calls came before something else (an approval request)
    const results = group.querySelectorAll('.tool_result').length;
    group.firstChild.textContent = `${results} result${results === 1 ? '' : 's'}${line}`;
  }
}

function build(entry) {
  const node = el('div', `msg ${entry.kind}`);
  switch (entry.kind) {
    case 'thought':
    case 'response':
    case 'reasoning': {
      node.append(who(entry));
      const body = el('div', 'body');
      body.innerHTML = entry.html;  // rendered and escaped by the server (markdown-it, raw HTML off)
      node.append(body);
      for (const url of entry.images) {
        const image = el('img', 'attachment');
        image.alt = 'attached image';
        showImage(image, url);
        node.append(image);
      }
      break;
    }
    case 'file': {
      // Files out: a download link; the file is fetched with the session (a plain href cannot carry it).
      node.append(who(entry), el('div', 'body', entry.text));
      if (entry.file) {
        const link = el('a', 'download', `download ${entry.file.name} (${entry.file.size} bytes)`);
        link.href = '#';
        link.addEventListener('click', async (event) => {
          event.preventDefault();
          const response = await fetch(entry.file.url, {headers: authorized()});
          if (!response.ok) { link.textContent = `${entry.file.name}: not available (${response.status})`; return; }
          const save = el('a');
          save.href = URL.createObjectURL(await response.blob());
          save.download = entry.file.name;
          save.click();
        });
        node.append(link);
      }
      break;
    }
    case 'tool_call':
      node.append(el('div', 'who', 'tool call'), el('pre', '', entry.text));
      break;
    case 'tool_result':
      if (entry.is_error) node.classList.add('failed');
      node.append(el('div', 'who', entry.is_error ? 'tool failed' : 'tool result'), el('pre', '', entry.text));
      break;
    case 'error':
      node.append(el('div', '', entry.text));
      if (entry.hint) node.append(el('div', 'hint', entry.hint));
      break;
    case 'approval_request': {
      node.dataset.request = entry.request_id;
      node.append(el('div', 'who', 'Codex asks for permission'), el('pre', '', entry.text));
      const buttons = el('div', 'buttons');
      const approve = el('button', 'approve', 'Approve');
      const session = el('button', 'approve-session', 'Approve for session');
      session.title = 'Codex runs the same again in this session without asking';
      const deny = el('button', 'deny', 'Deny');
      const choices = [[approve, 'approve'], [session, 'approve_for_session'], [deny, 'deny']];
      for (const [button, decision] of choices) {
        button.type = 'button';
        button.addEventListener('click', () => {
          if (send({type: 'approval', conversation: state.conversation, request_id: entry.request_id, decision})) {
            for (const [other] of choices) other.disabled = true;
          }
        });
      }
      buttons.append(approve, session, deny);
      node.append(buttons);
      break;
    }
    case 'status':
    case 'approval':
    case 'cancel':
    case 'reset':
      node.textContent = entry.text;  // the kit's wording: [turn completed], [ann asked to cancel the turn], ...
      break;
    default:
      node.classList.add('other');
      node.textContent = entry.text;
  }
  return node;
}

const DECIDED = {approve: 'approved', approve_for_session: 'approved for the session', deny: 'denied'};

function markAnswered(entry) {
  for (const request of document.querySelectorAll('.approval_request')) {
    if (request.dataset.request !== entry.request_id) continue;
    for (const button of request.querySelectorAll('button')) button.disabled = true;
    if (!request.querySelector('.answer')) request.append(el('div', 'answer', `${DECIDED[entry.decision] || entry.decision} by ${entry.sender}`));
  }
}

function streamDelta(entry) {
  let stream = state.streams.get(entry.stream);
  if (!stream) {
    const node = el('div', 'msg response stream');
    node.dataset.stream = entry.stream;
    node.append(el('div', 'who', 'codex · writing…'));
    const body = el('div', 'body');
    node.append(body);
    stream = {node, body, text: '', ids: new Set()};
    state.streams.set(entry.stream, stream);
    $('messages').append(node);
  }
  if (stream.ids.has(entry.id)) return;
  stream.ids.add(entry.id);
  stream.text += entry.text;
  stream.body.textContent = stream.text;
  scrollDown();
}

function dropStream(key) {
  // the complete reply, just added, shows it
  const stream = state.streams.get(key);
  if (stream) stream.node.remove();
  state.streams.delete(key);
}

function endStream(key) {
  // the turn ended before a reply completed it: shown as it is, no longer "writing…"
  const stream = state.streams.get(key);
  if (!stream) return;
  stream.node.classList.remove('stream');
  stream.node.classList.add('ended');
  stream.node.querySelector('.who').textContent = 'codex · unfinished (the turn ended)';
  state.streams.delete(key);
}

function trackTurn(turnState, ts) {
  if (turnState === 'turn_started') {
    state.running = true;
    state.turnStarted = Date.parse(ts);
  } else if (turnState.startsWith('turn_') || turnState === 'session_ended') {
    state.running = false;
  }
  updateTurn();
}

function elapsed(ms) {
  const total = Math.max(0, Math.floor(ms / 1000));
  const [h, m, sec] = [Math.floor(total / 3600), Math.floor(total / 60) % 60, total % 60];
  const two = (n) => String(n).padStart(2, '0');
  return h ? `${h}:${two(m)}:${two(sec)}` : `${m}:${two(sec)}`;
}

function updateTurn() {
  // A sign of life while a turn runs: the time since it started, once a second.
  $('stop').disabled = !state.running;
  const since = state.running && Number.isFinite(state.turnStarted) ? ` ${elapsed(Date.now() - state.turnStarted)}` : '';
  $('turn').textContent = state.running ? `Codex is working…${since}` : '';
  if (state.running && state.ticker === null) state.ticker = setInterval(updateTurn, 1000);
  if (!state.running && state.ticker !== null) { clearInterval(state.ticker); state.ticker = null; }
}

async function upload(file) {
  notice('');
  let answer;
  try {
    if (!state.session) { notice('not connected: the page reconnects by itself; try again in a moment'); return; }
    const response = await fetch('/upload', {method: 'POST', body: file, headers: {'Content-Type': 'application/octet-stream', ...authorized()}});
    answer = await response.json();
    if (!response.ok) { notice(answer.error || `upload failed (${response.status})`); return; }
  } catch (error) {
    notice('the image could not be uploaded: the page server is not reachable');
    return;
  }
  state.pending.push(answer);
  const thumb = el('img');
  thumb.alt = 'image to send';
  showImage(thumb, answer.url);
  $('attachments').append(thumb);
}

function submit() {
  const input = $('input');
  const text = input.value;
  if (!text.trim() && !state.pending.length) return;
  if (send({type: 'thought', conversation: state.conversation, text, attachments: state.pending.map((a) => a.name)})) {
    input.value = '';
    state.pending = [];
    $('attachments').replaceChildren();
  }
}

takeTokenFromAddress();

document.addEventListener('DOMContentLoaded', () => {
  $('composer').addEventListener('submit', (event) => { event.preventDefault(); submit(); });
  $('input').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) { event.preventDefault(); submit(); }
  });
  $('input').addEventListener('paste', (event) => {
    for (const item of event.clipboardData ? event.clipboardData.items : []) {
      if (item.kind === 'file' && item.type.startsWith('image/')) {
        event.preventDefault();
        upload(item.getAsFile());
      }
    }
  });
  $('file').addEventListener('change', (event) => {
    for (const file of event.target.files) upload(file);
    event.target.value = '';
  });
  $('menu').addEventListener('click', () => showMenu(!document.body.classList.contains('menu-open')));
  document.querySelector('main').addEventListener('click', (event) => {
    if (event.target !== $('menu') && document.body.classList.contains('menu-open')) showMenu(false);
  });
  $('stop').addEventListener('click', () => send({type: 'cancel', conversation: state.conversation}));
  $('reset').addEventListener('click', () => send({type: 'reset', conversation: state.conversation}));
  $('new-conversation').addEventListener('submit', (event) => {
    event.preventDefault();
    const name = $('new-name').value.trim();
    if (name) { $('new-name').value = ''; open(name); }
  });
  window.addEventListener('hashchange', () => { const name = conversationFromHash(); if (name) open(name); });
  connect();
});
