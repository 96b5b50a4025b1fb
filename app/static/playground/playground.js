// The playground: pick a model, stream an answer through EventSource, show TTFT and tokens/s.
"use strict";

const $ = (id) => document.getElementById(id);
let source = null; // the open EventSource
let run = null; // timings and token count of the current stream

function apiKey() {
  return $("api-key").value.trim();
}

function authHeaders() {
  return apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
}

function setStatus(state, text) {
  const status = $("status");
  status.dataset.state = state;
  status.textContent = text || state;
  const running = state === "streaming";
  $("generate").disabled = running;
  $("stop").disabled = !running;
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

// The ready models, from Triton's repository index. A 401 says the server wants a key.
async function loadModels() {
  const response = await fetch("/v2/repository/index", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...authHeaders() },
    body: JSON.stringify({ ready: true }),
  });
  if (response.status === 401) {
    $("api-key-label").hidden = false;
    showError(apiKey() ? "The API key was refused." : "This server requires an API key.");
    return;
  }
  if (!response.ok) {
    showError(`Could not list the models: HTTP ${response.status}`);
    return;
  }
  showError("");
  const select = $("model");
  select.replaceChildren();
  for (const entry of await response.json()) {
    const option = document.createElement("option");
    option.value = JSON.stringify([entry.name, entry.version]);
    option.textContent = entry.version ? `${entry.name} (version ${entry.version})` : entry.name;
    select.append(option);
  }
  if (!select.options.length) showError("No model is ready.");
}

function streamUrl() {
  const [name, version] = JSON.parse($("model").value);
  const params = new URLSearchParams({
    text_input: $("prompt").value,
    max_tokens: $("max-tokens").value,
    temperature: $("temperature").value,
    return_num_output_tokens: "true",
  });
  for (const [key, value] of new URLSearchParams($("extra").value.trim())) params.append(key, value);
  if (apiKey()) params.set("api_key", apiKey());
  const model = encodeURIComponent(name);
  const path = version
    ? `/v2/models/${model}/versions/${encodeURIComponent(version)}/generate_stream`
    : `/v2/models/${model}/generate_stream`;
  return `${path}?${params}`;
}

function first(value) {
  return Array.isArray(value) ? value[0] : value;
}

function onToken(event) {
  const data = JSON.parse(event.data);
  const now = performance.now();
  const text = first(data.text_output) || "";
  const count = Number(first(data.num_output_tokens) ?? 1);
  if (run.firstAt === null) {
    run.firstAt = now;
    run.firstTokens = count;
    $("ttft").textContent = `${Math.round(now - run.startedAt)} ms`;
  }
  run.lastAt = now;
  run.tokens += count;
  $("output").textContent += text;
  $("tokens").textContent = String(run.tokens);
  const seconds = (run.lastAt - run.firstAt) / 1000;
  if (seconds > 0) {
    $("rate").textContent = ((run.tokens - run.firstTokens) / seconds).toFixed(1);
  }
}

function finish(state, text) {
  if (source) source.close(); // closing aborts the engine request on the server
  source = null;
  setStatus(state, text);
}

function start(event) {
  event.preventDefault();
  if (source || !$("model").value) return;
  showError("");
  $("output").textContent = "";
  for (const id of ["ttft", "tokens", "rate"]) $(id).textContent = "–";
  run = { startedAt: performance.now(), firstAt: null, lastAt: null, tokens: 0, firstTokens: 0 };
  source = new EventSource(streamUrl());
  setStatus("streaming", "streaming…");
  source.onmessage = onToken;
  source.addEventListener("end", () => finish("done"));
  // Both the server's `event: error` (with data) and a failed connection (without) land here.
  source.addEventListener("error", (e) => {
    if (e.data) {
      showError(JSON.parse(e.data).error);
    } else {
      showError("The stream failed (server unreachable, or the API key was refused).");
    }
    finish("error");
  });
}

function stop() {
  finish("stopped");
}

document.addEventListener("DOMContentLoaded", () => {
  $("form").addEventListener("submit", start);
  $("stop").addEventListener("click", stop);
  $("api-key").addEventListener("change", loadModels);
  loadModels().catch((error) => showError(`Could not list the models: ${error}`));
});
