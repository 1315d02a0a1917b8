// What every page shares: building elements, formatting numbers, tables,
// forms that show the API's validation message at the field it names, and
// timers that stop when the page is left.
import { ApiError } from './api.js';

// h('div.card', {onclick}, child, ...): an element. Attributes whose name
// starts with "on" are listeners; "dataset" an object of data-*; children
// are nodes, strings or arrays of them (null and false skipped).
export function h(tag, attributes = {}, ...children) {
  const [name, ...classes] = tag.split('.');
  const element = document.createElement(name);
  if (classes.length) element.className = classes.join(' ');
  for (const [key, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) element.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(element.dataset, value);
    else if (key === 'class') element.className += ` ${value}`;
    // Through the CSSOM: stratad's Content-Security-Policy (style-src
    // 'self') refuses style attributes.
    else if (key === 'style') for (const [name, v] of Object.entries(value)) element.style.setProperty(name, v);
    else if (key in element && typeof value !== 'string') element[key] = value;
    else element.setAttribute(key, value === true ? '' : value);
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
}

export function clear(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

// Bytes in powers of 1024, as the CLI prints them.
export function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = Number(n ?? 0);
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${units[u]}`;
}

export const fixed = (v, digits) => Number(v ?? 0).toFixed(digits);
export const percent = (fraction) => `${(Number(fraction ?? 0) * 100).toFixed(0)}%`;
export const short = (name) => String(name ?? '').split('/').pop();
// An enum's name without its prefix: DISK_FAILED → FAILED.
export const state_name = (value, prefix) => String(value ?? '').replace(prefix, '');
export const time = (unix_ms) => (Number(unix_ms) ? new Date(Number(unix_ms)).toLocaleString() : '-');

// A size as people type it: bytes, or with K, M, G, T (powers of 1024),
// as the CLI reads it. NaN when it is not one.
export function parse_size(text) {
  const m = String(text).trim().match(/^(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?$/i);
  if (!m) return NaN;
  const power = ' KMGTP'.indexOf(m[2].toUpperCase() || ' ');
  return Math.round(Number(m[1]) * 1024 ** power);
}

// A table: header cells, then rows of cells; a row may be
// {cells, dataset, class} to mark it for styles and tests.
export function table(header, rows, { empty = 'none', caption } = {}) {
  return h('table', {},
    caption ? h('caption', {}, caption) : null,
    h('thead', {}, h('tr', {}, header.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, rows.length
      ? rows.map((r) => Array.isArray(r)
        ? h('tr', {}, r.map((c) => h('td', {}, c)))
        : h('tr', { dataset: r.dataset, class: r.class }, r.cells.map((c) => h('td', {}, c))))
      : h('tr', {}, h('td.empty', { colSpan: header.length }, empty))));
}

export function progress(fraction, label) {
  const f = Math.max(0, Math.min(1, Number(fraction) || 0));
  return h('span.progress', { role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': (f * 100).toFixed(0) },
    h('span.track', {}, h('span.bar', { style: { width: `${(f * 100).toFixed(1)}%` } })), h('span.label', {}, label ?? percent(f)));
}

export function badge(text, kind = '') {
  return h(`span.badge${kind ? `.${kind}` : ''}`, {}, text);
}

// A page's lifetime: its timers and listeners end when the router leaves it.
export class page_scope {
  constructor() {
    this.alive = true;
    this.stops = [];
  }
  // Runs fn now and every period_ms after each run has ended (never two at
  // once, so a slow array is not asked faster than it answers). The
  // promise is the first run's: it rejects when that fails (the page is
  // not drawn), while the later runs go on; their errors go to the banner.
  every(period_ms, fn) {
    let timer = 0;
    const run = async (first) => {
      if (!this.alive) return;
      try {
        await fn();
      } catch (e) {
        if (first) throw e;
        if (this.alive) show_error(e);
      } finally {
        if (this.alive) timer = setTimeout(() => run(false), period_ms);
      }
    };
    this.stops.push(() => clearTimeout(timer));
    return run(true);
  }
  end() {
    this.alive = false;
    for (const stop of this.stops) stop();
  }
}

// The banner under the navigation: the last error no form took.
export function show_error(error) {
  const banner = document.getElementById('banner');
  if (!banner) return;
  if (error instanceof ApiError && error.status === 401) return;  // the login form says it
  clear(banner, h('span', {}, error.message), h('button.link', { type: 'button', onclick: () => clear(banner), 'aria-label': 'dismiss' }, '×'));
  banner.hidden = false;
}

export function show_notice(text) {
  const banner = document.getElementById('banner');
  if (!banner) return;
  clear(banner, h('span.notice', {}, text), h('button.link', { type: 'button', onclick: () => clear(banner), 'aria-label': 'dismiss' }, '×'));
  banner.hidden = false;
}

// A form whose inputs name the API field they fill (data-field, e.g.
// "volume.size_bytes"). submit(form_data) makes the call; an ApiError is
// shown at the input whose field it names (or the closest enclosing one:
// "volume" for "volume.size_bytes.x"), and in the form's status line.
export function api_form({ title, fields, submit_label, submit, done }) {
  const status = h('p.form-status', { role: 'status' });
  const inputs = {};
  const rows = fields.map((f) => {
    const id = `f-${Math.random().toString(36).slice(2, 9)}`;
    let input;
    if (f.options) {
      input = h('select', { id, name: f.name }, f.options.map(([value, label]) => h('option', { value }, label)));
    } else if (f.type === 'checkbox') {
      input = h('input', { id, name: f.name, type: 'checkbox' });
    } else {
      input = h('input', { id, name: f.name, type: f.type ?? 'text', placeholder: f.placeholder ?? '', autocomplete: f.autocomplete ?? 'off' });
    }
    if (f.value !== undefined) input.value = f.value;
    input.dataset.field = f.field;
    inputs[f.name] = input;
    const error = h('span.field-error', { id: `${id}-error`, 'aria-live': 'polite' });
    input.setAttribute('aria-describedby', `${id}-error`);
    return h('div.form-row', {}, h('label', { for: id }, f.label), input, error);
  });
  const button = h('button', { type: 'submit' }, submit_label);
  const form = h('form.api-form', {
    novalidate: true,
    onsubmit: async (event) => {
      event.preventDefault();
      for (const e of form.querySelectorAll('.field-error')) e.textContent = '';
      for (const i of Object.values(inputs)) i.removeAttribute('aria-invalid');
      status.textContent = '';
      status.className = 'form-status';
      const values = {};
      for (const [name, input] of Object.entries(inputs)) values[name] = input.type === 'checkbox' ? input.checked : input.value.trim();
      button.disabled = true;
      try {
        const result = await submit(values, inputs);
        status.textContent = 'done';
        status.classList.add('ok');
        if (done) await done(result, form);
      } catch (e) {
        const input = e instanceof ApiError ? input_for(inputs, e.field) : null;
        if (input) {
          input.setAttribute('aria-invalid', 'true');
          input.parentElement.querySelector('.field-error').textContent = e.reason || e.message;
        }
        status.textContent = e.message;
        status.classList.add('error');
      } finally {
        button.disabled = false;
      }
    },
  }, title ? h('h3', {}, title) : null, rows, h('div.form-row', {}, button), status);
  form.inputs = inputs;
  return form;
}

function input_for(inputs, field) {
  if (!field) return null;
  const list = Object.values(inputs);
  for (let f = field; f; f = f.includes('.') ? f.slice(0, f.lastIndexOf('.')) : '') {
    const exact = list.find((i) => i.dataset.field === f);
    if (exact) return exact;
  }
  // A request-level name ("volume_id") may stand for the resource's.
  return list.find((i) => i.dataset.field.endsWith(`.${field}`)) ?? null;
}

// A button that makes one call, confirming first if asked; errors go to
// the banner.
export function action(label, run, { confirm_text, kind } = {}) {
  return h(`button.action${kind ? `.${kind}` : ''}`, {
    type: 'button',
    onclick: async (event) => {
      if (confirm_text && !window.confirm(confirm_text)) return;
      const button = event.currentTarget;
      button.disabled = true;
      try {
        await run();
      } catch (e) {
        show_error(e);
      } finally {
        button.disabled = false;
      }
    },
  }, label);
}
