// Small DOM and formatting helpers shared by the pages.

/** Creates an element: h("a", {href: "/x", class: "c", onclick}, "text", child, [more]). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "style" && typeof value === "object") Object.assign(el.style, value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const fmt = {
  int(n) {
    return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US");
  },
  tokens(n) {
    if (n === null || n === undefined) return "—";
    if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
    if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
    return String(n);
  },
  reward(r) {
    return r === null || r === undefined ? "—" : Number(r).toFixed(Number.isInteger(r) ? 0 : 2);
  },
  prob(p) {
    return p === null || p === undefined ? "—" : Number(p).toFixed(3);
  },
  cost(c) {
    if (c === null || c === undefined) return "—";
    return c < 0.01 && c > 0 ? "$" + c.toFixed(4) : "$" + c.toFixed(2);
  },
  duration(s) {
    if (s === null || s === undefined) return "—";
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " m " + Math.round(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " m";
  },
  time(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toISOString().replace("T", " ").slice(0, 19) + "Z";
  },
  interval(i) {
    if (!i) return "—";
    return `${i.estimate.toFixed(3)} [${i.low.toFixed(3)}, ${i.high.toFixed(3)}]`;
  },
  signed(x) {
    return (x >= 0 ? "+" : "−") + Math.abs(x).toFixed(3);
  },
  bytes(n) {
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
    if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
    return n + " B";
  },
};

/** A coloured badge for a job's or trial's state. */
export function badge(state, text) {
  return h("span", { class: `badge st-${state}`, "data-state": state }, text || state.replace(/_/g, " "));
}

/** The current query string as an object, and a way to write it back without a reload. */
export function query() {
  return Object.fromEntries(new URLSearchParams(location.search));
}

export function setQuery(values) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(values)) if (v !== "" && v !== undefined && v !== null) params.set(k, v);
  const search = params.toString();
  history.replaceState(history.state, "", location.pathname + (search ? "?" + search : ""));
}

/** A debounced call. */
export function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
