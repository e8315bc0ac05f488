// The nmt serve page: send the lines (and any terms) to /v1/translate with alignments and draw each answer.
// No framework and no build step: plain DOM code.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
let info = null;

function setStatus(text, isError = false) {
  const status = $("#status");
  status.textContent = text;
  status.classList.toggle("error", isError);
}

function headers() {
  const result = { "Content-Type": "application/json" };
  const key = $("#api-key").value.trim();
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

async function loadInfo() {
  try {
    const response = await fetch("/v1/info");
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    info = body;
  } catch (error) {
    $("#pair").textContent = `model not ready (${error.message}); retrying…`;
    setTimeout(loadInfo, 1000);
    return;
  }
  const names = { de: "German", en: "English", fr: "French", cs: "Czech", es: "Spanish" };
  const name = (code) => names[code] || code;
  $("#pair").textContent = `${name(info.source_language)} → ${name(info.target_language)}`;
  $("#source-label").textContent = `${name(info.source_language)} text, one sentence per line`;
  $("#beam").value = info.beam_size;
  $("#beam").max = info.max_beam;
  $("#key-field").hidden = !info.auth_required;
  $("#translate").disabled = false;
}

function glossary() {
  // "source = target" lines as [source, target] pairs; throws naming the first line that is not one.
  return $("#terms").value.split(/\r\n|\n|\r/).map((line, index) => [line, index + 1])
    .filter(([line]) => line.trim())
    .map(([line, number]) => {
      const at = line.indexOf("=");
      const pair = [line.slice(0, at).trim(), line.slice(at + 1).trim()];
      if (at < 0 || !pair[0] || !pair[1]) throw new Error(`terms line ${number}: expected "source = target"`);
      return pair;
    });
}

async function translate() {
  const lines = $("#source").value.split(/\r\n|\n|\r/).map((line) => line.trim()).filter(Boolean);
  if (!lines.length) {
    setStatus("Type a sentence first.", true);
    return;
  }
  const request = {
    text: lines,
    beam_size: Number($("#beam").value),
    n_best: Number($("#nbest").value),
    alignments: true,
  };
  try {
    const terms = glossary();
    if (terms.length) request.glossary = terms;
  } catch (error) {
    setStatus(error.message, true);
    return;
  }
  $("#translate").disabled = true;
  setStatus("Translating…");
  const started = performance.now();
  try {
    const response = await fetch("/v1/translate", { method: "POST", headers: headers(), body: JSON.stringify(request) });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    render(lines, body.translations);
    $("#signature").textContent = body.signature;
    const ms = Math.round(performance.now() - started);
    setStatus(`${lines.length} sentence${lines.length > 1 ? "s" : ""} in ${ms} ms`);
  } catch (error) {
    setStatus(`Error: ${error.message}`, true);
  } finally {
    $("#translate").disabled = false;
  }
}

function wordSpans(container, words, attribute) {
  container.replaceChildren();
  words.forEach((word, index) => {
    const span = document.createElement("span");
    span.className = "word";
    span.dataset[attribute] = index;
    span.textContent = word;
    container.append(span, " ");
  });
}

function render(lines, translations) {
  const results = $("#results");
  results.replaceChildren();
  translations.forEach((translation, index) => {
    const card = $("#result-template").content.firstElementChild.cloneNode(true);
    const alignment = translation.alignment;
    wordSpans($(".source", card), alignment.source_words, "i");
    wordSpans($(".translation", card), alignment.target_words, "j");
    if (!alignment.target_words.length) $(".translation", card).textContent = translation.text;
    if (translation.nbest.length > 1) {
      const list = $(".nbest", card);
      list.hidden = false;
      for (const alternative of translation.nbest) {
        const item = document.createElement("li");
        const text = document.createElement("span");
        text.className = "alternative";
        text.textContent = alternative.text;
        const score = document.createElement("span");
        score.className = "score";
        score.textContent = alternative.score.toFixed(3);
        item.append(text, score);
        list.append(item);
      }
    }
    showTerms($(".terms", card), translation.terms || []);
    if (translation.degenerate) {
      $(".degenerate", card).hidden = false;
      $(".degenerate", card).textContent = `This translation looks degenerate (${translation.degenerate}).`;
    }
    drawHeatmap($(".heatmap", card), alignment);
    $(".links", card).textContent = alignment.links ? `links: ${alignment.links}` : "";
    connectHover(card, alignment);
    card.dataset.index = index;
    results.append(card);
  });
}

function showTerms(list, terms) {
  // Each glossary term found in the sentence, marked by whether the translation holds one of its targets.
  list.hidden = !terms.length;
  for (const term of terms) {
    const item = document.createElement("li");
    item.className = term.met ? "met" : "unmet";
    item.textContent = `${term.met ? "✓" : "✗"} ${term.source} → ${term.target.join(" / ")}`;
    item.title = term.met ? "in the translation" : "not in the translation";
    list.append(item);
  }
}

function drawHeatmap(table, alignment) {
  // Rows: target words; columns: source words; cell shade: soft attention weight.
  const head = document.createElement("tr");
  head.append(document.createElement("th"));
  alignment.source_words.forEach((word, i) => {
    const th = document.createElement("th");
    th.className = "src";
    th.dataset.i = i;
    const label = document.createElement("span");
    label.textContent = word;
    th.append(label);
    head.append(th);
  });
  table.append(head);
  alignment.matrix.forEach((row, j) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.className = "tgt word";
    th.dataset.j = j;
    th.textContent = alignment.target_words[j];
    tr.append(th);
    row.forEach((weight, i) => {
      const td = document.createElement("td");
      td.dataset.i = i;
      td.style.setProperty("--w", Math.sqrt(weight).toFixed(3));
      td.title = `${alignment.target_words[j]} ← ${alignment.source_words[i]}: ${weight.toFixed(3)}`;
      tr.append(td);
    });
    table.append(tr);
  });
}

function linkedSources(alignment, j) {
  return alignment.links.split(" ").filter(Boolean).map((link) => link.split("-").map(Number))
    .filter(([, target]) => target === j).map(([source]) => source);
}

function connectHover(card, alignment) {
  const clear = () => card.querySelectorAll(".highlight, .active").forEach((node) => {
    node.classList.remove("highlight", "active");
    node.style.removeProperty("--h");
  });
  const show = (j) => {
    clear();
    card.querySelectorAll(`[data-j="${j}"]`).forEach((node) => node.classList.add("active"));
    const weights = alignment.matrix[j] || [];
    for (const i of linkedSources(alignment, j)) {
      card.querySelectorAll(`[data-i="${i}"]:not(td)`).forEach((node) => node.classList.add("highlight"));
    }
    weights.forEach((weight, i) => {
      card.querySelectorAll(`.source [data-i="${i}"]`).forEach((node) => node.style.setProperty("--h", weight.toFixed(3)));
    });
  };
  card.querySelectorAll("[data-j]").forEach((node) => {
    node.addEventListener("mouseenter", () => show(Number(node.dataset.j)));
    node.addEventListener("mouseleave", clear);
  });
  card.querySelectorAll("td").forEach((cell) => {
    cell.addEventListener("mouseenter", () => show(Number(cell.parentElement.firstChild.dataset.j)));
    cell.addEventListener("mouseleave", clear);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $("#translate").addEventListener("click", translate);
  $("#source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
  });
  $("#beam").addEventListener("change", () => {
    $("#nbest").max = $("#beam").value;
    if (Number($("#nbest").value) > Number($("#beam").value)) $("#nbest").value = $("#beam").value;
  });
  loadInfo();
});
