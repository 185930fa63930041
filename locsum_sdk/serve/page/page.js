// The page `locsum serve` serves at /: send a text or files to POST v1/summarize as a stream, show the summary as it
// is decided, and, for a chosen sentence, mark its passages in the input. Everything the input or the answer holds is
// put on the page as text (textContent, createTextNode), never as markup. The API's spans count code points; a
// JavaScript string counts UTF-16 units, so every span goes through `offsets` before it slices a string.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "locsum-token";

const state = {
  docs: [],        // {text, source, at: code point -> UTF-16 index, length: in code points}
  units: [],       // the answer's units: {document, start, end, weight, source}
  text: "",        // the summary so far (or final)
  textAt: null,
  sentences: [],   // {start, end, supported, passages, unit_weights}
  final: false,
  chosen: null,    // index of the chosen sentence
  controller: null,
  started: 0,
};

function offsets(text) {
  // a function from a code point offset in `text` to its UTF-16 index, and the text's length in code points
  if (!/[\uD800-\uDFFF]/.test(text)) {
    return { at: (i) => i, length: text.length };
  }
  const map = [];
  for (let i = 0; i < text.length; i++) {
    map.push(i);
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
    }
  }
  map.push(text.length);
  return { at: (i) => map[Math.max(0, Math.min(i, map.length - 1))], length: map.length - 1 };
}

function setDocuments(documents) {
  state.docs = documents.map((doc) => ({ text: doc.text, source: doc.source || null, ...offsets(doc.text) }));
  const characters = state.docs.reduce((sum, doc) => sum + doc.length, 0);
  $("input-size").textContent = `${state.docs.length} document${state.docs.length === 1 ? "" : "s"}, ` +
    `${characters.toLocaleString()} characters`;
  renderDocuments();
}

function setText(text) {
  state.text = text;
  state.textAt = offsets(text);
}

function documentLabel(index) {
  const source = state.docs[index].source;
  if (!source) return state.docs.length === 1 ? "The text" : `Document ${index + 1}`;
  let label = source.file;
  if (source.page !== undefined) {
    label += source.last_page !== undefined ? `, pages ${source.page}–${source.last_page}` : `, page ${source.page}`;
  }
  if (source.heading !== undefined) label += `: ${source.heading}`;
  return label;
}

// ---- the input, cut where units and the chosen sentence's passages begin and end ----

function chosenPassages() {
  if (state.chosen === null || !state.sentences[state.chosen]) return [];
  return state.sentences[state.chosen].passages;
}

function renderDocuments() {
  const root = $("documents");
  root.replaceChildren();
  state.docs.forEach((doc, index) => {
    const section = document.createElement("section");
    section.className = "document";
    section.id = `document-${index}`;
    const heading = document.createElement("h3");
    heading.textContent = documentLabel(index);
    const body = document.createElement("div");
    body.className = "body";
    body.dir = "auto";  // a right-to-left text (Arabic, Hebrew) shows as one
    section.append(heading, body);
    root.append(section);
    renderBody(index);
  });
}

function renderBody(index) {
  const doc = state.docs[index];
  const body = document.querySelector(`#document-${index} .body`);
  if (!body) return;
  const units = state.units.map((unit, number) => ({ ...unit, number })).filter((u) => u.document === index);
  const passages = chosenPassages().map((p, rank) => ({ ...p, rank })).filter((p) => p.document === index);
  const cuts = new Set([0, doc.length]);
  for (const span of [...units, ...passages]) {
    cuts.add(Math.max(0, Math.min(span.start, doc.length)));
    cuts.add(Math.max(0, Math.min(span.end, doc.length)));
  }
  const points = [...cuts].sort((a, b) => a - b);
  const pieces = [];
  const firstOf = new Set();
  for (let i = 0; i + 1 < points.length; i++) {
    const [start, end] = [points[i], points[i + 1]];
    const text = doc.text.slice(doc.at(start), doc.at(end));
    const unit = units.find((u) => u.start <= start && end <= u.end);
    const passage = passages.find((p) => p.start <= start && end <= p.end);
    const span = document.createElement("span");
    if (unit) {
      span.className = "unit";
      span.dataset.unit = unit.number;
      if (!firstOf.has(unit.number)) {
        firstOf.add(unit.number);
        span.id = `unit-${unit.number}`;
        span.classList.add("first");
      }
    } else if (state.units.length) {
      span.className = "dropped";
      span.title = "not read by the model (left out by its selection or by the input limit)";
    }
    if (passage) {
      const mark = document.createElement("mark");
      mark.className = passage.rank === 0 ? "passage" : "passage second";
      mark.dataset.passage = passage.rank;
      mark.textContent = text;
      span.append(mark);
    } else {
      span.textContent = text;
    }
    pieces.push(span);
  }
  body.replaceChildren(...pieces);
}

// ---- the strip of unit weights ----

function renderStrip() {
  const strip = $("strip");
  strip.replaceChildren();
  if (!state.units.length) return;
  const sentence = state.chosen === null ? null : state.sentences[state.chosen];
  const weights = sentence && sentence.unit_weights ? sentence.unit_weights : state.units.map((u) => u.weight);
  const top = Math.max(...weights, 1e-9);
  const cited = new Set((sentence ? sentence.passages : []).map((p) => p.unit));
  state.docs.forEach((doc, index) => {
    let at = 0;
    const units = state.units.map((u, number) => ({ ...u, number })).filter((u) => u.document === index)
      .sort((a, b) => a.start - b.start);
    for (const unit of units) {
      if (unit.start > at) strip.append(gap(unit.start - at));
      const bar = document.createElement("button");
      bar.type = "button";
      bar.className = cited.has(unit.number) ? "unit-bar cited" : "unit-bar";
      bar.style.flexGrow = String(Math.max(unit.end - unit.start, 1));
      bar.style.background = `rgba(var(--weight), ${(0.06 + 0.94 * (weights[unit.number] || 0) / top).toFixed(3)})`;
      bar.title = `unit ${unit.number + 1}, ${documentLabel(index)}: weight ${(weights[unit.number] || 0).toFixed(3)}`;
      bar.setAttribute("aria-label", bar.title);
      bar.addEventListener("click", () => scrollTo(document.getElementById(`unit-${unit.number}`)));
      strip.append(bar);
      at = Math.max(at, unit.end);
    }
    if (doc.length > at) strip.append(gap(doc.length - at));
  });
}

function gap(length) {
  const part = document.createElement("span");
  part.className = "gap";
  part.style.flexGrow = String(length);
  part.title = "not read by the model";
  return part;
}

function scrollTo(element) {
  if (element) element.scrollIntoView({ block: "center" });
}

// ---- the summary, its sentences and their passages ----

function renderSummary() {
  const root = $("summary");
  const pieces = [];
  let at = 0;
  state.sentences.forEach((sentence, index) => {
    if (!sentence) return;
    if (sentence.start > at) pieces.push(document.createTextNode(slice(at, sentence.start)));
    const span = document.createElement("span");
    span.className = "sentence";
    if (!sentence.supported) {
      span.classList.add("unsupported");
      span.title = "no passage of the input supports this sentence";
    }
    if (index === state.chosen) span.classList.add("chosen");
    span.dataset.sentence = index;
    span.tabIndex = 0;
    span.setAttribute("role", "button");
    span.textContent = slice(sentence.start, sentence.end);
    const marker = document.createElement("sup");
    marker.textContent = `[${index + 1}]`;
    span.append(marker);
    span.addEventListener("click", () => choose(index));
    span.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        choose(index);
      }
    });
    pieces.push(span);
    at = sentence.end;
  });
  if (state.textAt && at < state.textAt.length) {
    const rest = document.createElement("span");
    rest.className = state.final ? "" : "pending";
    rest.textContent = slice(at, state.textAt.length);
    pieces.push(rest);
  }
  root.replaceChildren(...pieces);
}

function slice(start, end) {
  return state.text.slice(state.textAt.at(start), state.textAt.at(end));
}

function choose(index) {
  const before = new Set(chosenPassages().map((p) => p.document));
  state.chosen = state.chosen === index ? null : index;
  const after = chosenPassages();
  for (const document of new Set([...before, ...after.map((p) => p.document)])) renderBody(document);
  renderSummary();
  renderStrip();
  renderPassages();
  const first = document.querySelector('mark.passage[data-passage="0"]');
  scrollTo(first);
}

function renderPassages() {
  const list = $("passages");
  list.replaceChildren();
  if (state.chosen === null) return;
  const sentence = state.sentences[state.chosen];
  if (!sentence.passages.length) {
    const item = document.createElement("li");
    item.textContent = "No passage of the input holds this sentence's words.";
    list.append(item);
    return;
  }
  if (!sentence.supported) {
    const item = document.createElement("li");
    item.className = "where";
    item.textContent = "Unsupported: these passages hold less than half of the sentence's content words.";
    list.append(item);
  }
  sentence.passages.forEach((passage, rank) => {
    const doc = state.docs[passage.document];
    const item = document.createElement("li");
    const where = document.createElement("span");
    where.className = "where";
    const share = `${Math.round(passage.shared * 100)}% of its content words`;
    where.textContent = doc ? `${documentLabel(passage.document)}, unit ${passage.unit + 1}: ${share}` : share;
    const go = document.createElement("button");
    go.type = "button";
    go.dir = "auto";
    go.textContent = doc ? doc.text.slice(doc.at(passage.start), doc.at(passage.end)) : "(the input is not shown)";
    go.addEventListener("click", () => scrollTo(document.querySelector(`mark.passage[data-passage="${rank}"]`)));
    item.append(where, go);
    list.append(item);
  });
}

// ---- the request ----

function showError(message) {
  const error = $("error");
  error.textContent = message;
  error.hidden = !message;
}

function status(message) {
  $("status").textContent = message;
}

async function readFile(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return { name: file.name, data: btoa(binary) };
}

function headers() {
  const out = { "Content-Type": "application/json", Accept: "text/event-stream" };
  const token = $("token").value.trim();
  if (token) {
    out.Authorization = `Bearer ${token}`;
    sessionStorage.setItem(TOKEN_KEY, token);
  }
  return out;
}

async function submit(event) {
  event.preventDefault();
  showError("");
  const text = $("text").value;
  const files = [...$("files").files];
  if (!files.length && !text.trim()) {
    showError("Paste a text or choose files to summarize.");
    return;
  }
  const request = { stream: true, return_documents: true };
  const query = $("query").value.trim();
  if (query) request.query = query;
  Object.assign(state, { units: [], sentences: [], chosen: null, final: false });
  setText("");
  renderSummary();
  renderPassages();
  renderStrip();
  if (files.length) {
    status("reading files…");
    request.files = await Promise.all(files.map(readFile));
    setDocuments([]);
  } else {
    request.text = text;
    setDocuments([{ text }]);
  }
  state.controller = new AbortController();
  state.started = performance.now();
  $("submit").disabled = true;
  $("stop").disabled = false;
  status("summarizing…");
  try {
    const response = await fetch("v1/summarize", {
      method: "POST", headers: headers(), body: JSON.stringify(request), signal: state.controller.signal,
    });
    if (!response.ok) {
      await failed(response);
      return;
    }
    await readEvents(response);
  } catch (err) {
    if (err.name === "AbortError") status("stopped");
    else showError(`The request failed: ${err.message}`);
  } finally {
    $("submit").disabled = false;
    $("stop").disabled = true;
    state.controller = null;
  }
}

async function failed(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body.error) message = `${body.error.code}: ${body.error.message}`;
  } catch (err) { /* not JSON: the status line says it */ }
  if (response.status === 401) $("token-row").hidden = false;
  status("");
  showError(message);
}

async function readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}

function onEvent(name, data) {
  if (name === "partial") {
    setText(data.text);
    renderSummary();
  } else if (name === "sentence") {
    state.sentences.length = Math.min(state.sentences.length, data.index);
    state.sentences[data.index] = data;
    renderSummary();
  } else if (name === "summary") {
    finish(data);
  } else if (name === "error") {
    status("");
    showError(`${data.code}: ${data.message}`);
  }
}

function finish(answer) {
  state.final = true;
  state.chosen = null;
  setText(answer.summary);
  state.sentences = answer.sentences;
  state.units = answer.units;
  setDocuments(answer.documents || state.docs);
  renderSummary();
  renderStrip();
  renderPassages();
  const supported = answer.sentences.filter((s) => s.supported).length;
  const seconds = ((performance.now() - state.started) / 1000).toFixed(1);
  status([`${answer.tokens} tokens from ${answer.units.length} units in ${seconds} s`,
    `${supported} of ${answer.sentences.length} sentences supported`, ...(answer.warnings || [])].join("; "));
  $("summary").dataset.done = "true";
}

async function start() {
  $("request").addEventListener("submit", submit);
  $("stop").addEventListener("click", () => state.controller && state.controller.abort());
  $("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
  try {
    const ready = await (await fetch("readyz")).json();
    if (ready.kind) $("model").textContent = `a ${ready.kind} model`;
    $("token-row").hidden = ready.auth !== "bearer";
  } catch (err) {
    $("model").textContent = "(the server did not answer /readyz)";
  }
}

start();
