// The coven-codex web page. Every message is keyed by its journal entry id and the live channel
// resumes from the last journal position this tab has, so nothing is shown twice or skipped.
// Text from users and the model is set with textContent; the only HTML inserted is `html`,
// which the server rendered from Markdown with raw HTML disabled.
'use strict';

const $ = (id) => document.getElementById(id);
const RECENT_REPLIES = 8;
const state = {
  conversation: null,  // shown conversation
  after: null,         // journal position after the last entry of it this tab has
  socket: null,
  retry: 0,
  sender: '',
  names: [],
  running: false,
  streams: new Map(),  // item_id -> {el, text}
  doneItems: new Set(),
  recent: [],          // recent complete replies, to drop deltas that come after their reply
  pending: [],         // uploaded images waiting to be sent: {name, url}
};

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
  const socket = new WebSocket(`ws://${location.host}/live`);
  state.socket = socket;
  socket.onopen = () => {
    state.retry = 0;
    $('connection').textContent = 'connected';
    $('connection').className = 'connection live';
    if (state.conversation !== null) subscribe(false);
  };
  socket.onmessage = (event) => receive(JSON.parse(event.data));
  socket.onclose = () => {
    if (state.socket !== socket) return;
    state.socket = null;
    $('connection').textContent = 'reconnecting…';
    $('connection').className = 'connection';
    const delay = Math.min(5000, 200 * 2 ** state.retry);
    state.retry = Math.min(state.retry + 1, 5);
    setTimeout(connect, delay);
  };
}

function subscribe(fresh) {
  if (fresh) {
    state.after = null;
    state.running = false;
    state.streams.clear();
    state.doneItems.clear();
    state.recent = [];
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

function open(name) {
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
  if (entry.kind === 'delta') { streamDelta(entry); return; }
  if (entry.kind === 'response') finishStreams(entry);
  if (entry.kind === 'status') trackTurn(entry.state);
  if (entry.kind === 'approval') markAnswered(entry);
  const node = build(entry);
  node.id = `m-${entry.id}`;
  node.dataset.kind = entry.kind;
  $('messages').append(node);
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
        image.src = url;
        image.alt = 'attached image';
        node.append(image);
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
      const deny = el('button', 'deny', 'Deny');
      for (const [button, decision] of [[approve, 'approve'], [deny, 'deny']]) {
        button.type = 'button';
        button.addEventListener('click', () => {
          if (send({type: 'approval', conversation: state.conversation, request_id: entry.request_id, decision})) {
            approve.disabled = true;
            deny.disabled = true;
          }
        });
      }
      buttons.append(approve, deny);
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

function markAnswered(entry) {
  for (const request of document.querySelectorAll('.approval_request')) {
    if (request.dataset.request !== entry.request_id) continue;
    for (const button of request.querySelectorAll('button')) button.disabled = true;
    if (!request.querySelector('.answer')) request.append(el('div', 'answer', `${entry.decision === 'approve' ? 'approved' : 'denied'} by ${entry.sender}`));
  }
}

function streamDelta(entry) {
  const item = entry.item_id || '';
  if (state.doneItems.has(item)) return;
  let stream = state.streams.get(item);
  if (!stream) {
    if (state.recent.some((reply) => reply.startsWith(entry.text))) { state.doneItems.add(item); return; }
    const node = el('div', 'msg response stream');
    node.append(el('div', 'who', 'codex · writing…'));
    const body = el('div', 'body');
    node.append(body);
    stream = {node, body, text: '', ids: new Set()};
    state.streams.set(item, stream);
    $('messages').append(node);
  }
  if (stream.ids.has(entry.id)) return;
  stream.ids.add(entry.id);
  stream.text += entry.text;
  stream.body.textContent = stream.text;
  scrollDown();
}

function finishStreams(entry) {
  state.recent.push(entry.text);
  if (state.recent.length > RECENT_REPLIES) state.recent.shift();
  for (const [item, stream] of state.streams) {
    stream.node.remove();
    state.streams.delete(item);
    state.doneItems.add(item);
  }
}

function trackTurn(turnState) {
  if (turnState === 'turn_started') state.running = true;
  else if (turnState.startsWith('turn_') || turnState === 'session_ended') state.running = false;
  updateTurn();
}

function updateTurn() {
  $('stop').disabled = !state.running;
  $('turn').textContent = state.running ? 'Codex is working…' : '';
}

async function upload(file) {
  notice('');
  let answer;
  try {
    const response = await fetch('/upload', {method: 'POST', body: file, headers: {'Content-Type': 'application/octet-stream'}});
    answer = await response.json();
    if (!response.ok) { notice(answer.error || `upload failed (${response.status})`); return; }
  } catch (error) {
    notice('the image could not be uploaded: the page server is not reachable');
    return;
  }
  state.pending.push(answer);
  const thumb = el('img');
  thumb.src = answer.url;
  thumb.alt = 'image to send';
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
