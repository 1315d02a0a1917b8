// The management API over HTTP: the Connect protocol's unary JSON form of
// strata.v1.Array (proto/strata/v1/array.proto), as stratad serves it.
// POST /strata.v1.Array/<Method> with the request message as JSON
// (lowerCamelCase names, 64-bit integers as strings); 200 answers with the
// response message, every field present. Any other status answers
//   {"code": "invalid_argument", "message": "volume.size_bytes: ...",
//    "details": [{"type": "strata.v1.ErrorInfo", "debug": {"field", "reason"}}]}
// which call() throws as an ApiError. A 401 also tells the listeners set
// with on_unauthenticated (the app shows its login form).

export class ApiError extends Error {
  // code: the Connect code ("invalid_argument"); field: the request field
  // at fault as the gRPC API names it ("volume.size_bytes"), or "";
  // reason: the words without the field; status: the HTTP status.
  constructor({ code, message, field, reason, status }) {
    super(message);
    this.code = code;
    this.field = field;
    this.reason = reason;
    this.status = status;
  }
}

const unauthenticated_listeners = new Set();
export function on_unauthenticated(listener) {
  unauthenticated_listeners.add(listener);
  return () => unauthenticated_listeners.delete(listener);
}

// Calls one method; resolves to the response message, rejects with an
// ApiError (a network failure is one too, code "unavailable").
export async function call(method, request = {}) {
  let response;
  try {
    response = await fetch(`/strata.v1.Array/${method}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(request),
      credentials: 'same-origin',
    });
  } catch (e) {
    throw new ApiError({ code: 'unavailable', message: `the array cannot be reached: ${e.message}`, field: '', reason: e.message, status: 0 });
  }
  const text = await response.text();
  let body = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    body = { message: text };
  }
  if (response.ok) return body;
  const debug = body.details?.[0]?.debug ?? {};
  const error = new ApiError({
    code: body.code ?? `http_${response.status}`,
    message: body.message ?? `HTTP ${response.status}`,
    field: debug.field ?? '',
    reason: debug.reason ?? body.message ?? '',
    status: response.status,
  });
  if (response.status === 401) for (const listener of unauthenticated_listeners) listener(error);
  throw error;
}

// Every item of a paged list: follows next_page_token to the end.
// `key` is the repeated field ("volumes"); `limit` stops early.
export async function list_all(method, request, key, limit = Infinity) {
  const items = [];
  let page_token = '';
  do {
    const page = await call(method, { ...request, pageSize: 1000, pageToken: page_token });
    items.push(...(page[key] ?? []));
    page_token = page.nextPageToken ?? '';
  } while (page_token && items.length < limit);
  return items;
}

// Exchanges the bearer token for the session cookie (HttpOnly, set by
// stratad); rejects with an ApiError when the token is refused.
export async function login(token) {
  const response = await fetch('/login', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token }),
    credentials: 'same-origin',
  });
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try {
      message = (await response.json()).message ?? message;
    } catch {}
    throw new ApiError({ code: 'unauthenticated', message, field: 'token', reason: message, status: response.status });
  }
}

export async function logout() {
  await fetch('/logout', { method: 'POST', credentials: 'same-origin' });
}

// 64-bit integers come as strings (the protobuf JSON mapping): a number
// for display and arithmetic (exact below 2^53, i.e. 8 PiB).
export const num = (v) => Number(v ?? 0);
