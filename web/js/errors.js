// Plain-language wording for what the server and the agent report. People read these, so
// no codes, Go durations ("1m0s"), regular expressions or internal component names.

/** humanDuration turns a Go duration ("1m0s", "90s", "1h30m0s", "250ms") into words. */
export function humanDuration(d) {
  const m = /^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$/.exec(d);
  if (!m || !m[0]) return d;
  let secs = (+m[1] || 0) * 3600 + (+m[2] || 0) * 60 + (+m[3] || 0) + (+m[4] || 0) / 1000;
  if (secs < 1) return 'a moment';
  const plural = (n, w) => `${n} ${w}${n === 1 ? '' : 's'}`;
  const h = Math.floor(secs / 3600);
  const min = Math.floor((secs - h * 3600) / 60);
  const sec = Math.round(secs - h * 3600 - min * 60);
  const parts = [];
  if (h) parts.push(plural(h, 'hour'));
  if (min) parts.push(plural(min, 'minute'));
  if (sec) parts.push(plural(sec, 'second'));
  return parts.join(' ');
}

const GO_DURATION = /\b(?:\d+h)?(?:\d+m(?!s))?(?:\d+(?:\.\d+)?s|\d+ms)\b|\b\d+h\d+m\b/g;
const REGEXY = /\^\[|\]\{|\\[dws]|\(\?[:=!]|\[[^\]]*-[^\]]*\]\{?\d*,?\d*\}?\$?/;

/** tidy replaces Go durations with words and drops anything that reads like a regex. */
export function tidy(msg) {
  let s = String(msg || '').trim();
  if (!s) return s;
  if (REGEXY.test(s)) return '';
  s = s.replace(GO_DURATION, (d) => humanDuration(d));
  return s.charAt(0).toUpperCase() + s.slice(1);
}

// Codes the API answers with → what the person should read.
const BY_CODE = {
  rate_limited: (e) => `You are sending messages faster than allowed.${e.retryAfter ? ` Trying again in ${e.retryAfter} s.` : ' Wait a moment and try again.'}`,
  queue_unavailable: () => 'The job queue is not reachable right now, so your message was not accepted yet.',
  appwrite_unavailable: () => 'Storage is not reachable right now.',
  events_unavailable: () => 'Live updates are not reachable right now.',
  not_configured: () => 'The assistant is not set up yet. Ask an administrator to finish the setup.',
  role_unavailable: () => 'That kind of work is not available right now. Try Chat, or ask an administrator.',
  invalid_role: () => 'That kind of work is not available. Pick another one from the list.',
  invalid_text: () => 'Write a message first.',
  text_too_long: (e) => tidy(e.message) || 'That message is too long.',
  body_too_large: () => 'That message is too long.',
  invalid_title: () => 'That title is too long.',
  request_id_reused: () => 'That message was already sent.',
  approval_not_pending: () => 'That approval is no longer pending; the run has moved on.',
  approval_request_mismatch: () => 'That approval is no longer pending; the run has moved on.',
  approval_already_decided: () => 'A different answer was already given for that approval.',
  not_found: () => 'That item no longer exists, or it is not yours.',
  unauthenticated: () => 'Your session expired. Sign in again.',
  forbidden: () => 'You are not allowed to do that.',
  not_a_member: () => 'This account has not been admitted to the assistant yet. Ask its administrator for an invitation.',
  role_not_allowed: () => 'Your account may not use that kind of work. Pick another one from the list.',
  invitation_invalid: () => 'This invitation code is not valid. Check that you copied the whole link or code, or ask for a new invitation.',
  invitation_expired: () => 'This invitation has expired. Ask the person who invited you for a new one.',
  invitation_used: () => 'This invitation has already been used. If you made the account, sign in instead; otherwise ask for a new invitation.',
  account_exists: () => 'An account with this email already exists. Sign in instead, or use another email.',
  invalid_email: () => 'Enter a plain email address, like name@example.com.',
  invalid_password: () => 'The password must be 8 to 256 characters long.',
  invalid_name: () => 'The name must be at most 128 characters long.',
  invalid_account: () => 'That email, password or name was not accepted. Try another.',
  confirm_email: () => 'Type the account\'s email exactly as shown to confirm whom to forget.',
  own_account: () => 'You cannot forget yourself; another administrator can.',
  internal: () => 'The server had a problem.',
  misconfigured: () => 'The server is misconfigured. Ask an administrator.',
};

/** apiErrorText words an ApiError (status, code, message, retryAfter). */
export function apiErrorText(e) {
  const f = BY_CODE[e.code];
  if (f) return f(e);
  if (e.status >= 500) return 'The server had a problem.';
  if (e.status === 429) return BY_CODE.rate_limited(e);
  return tidy(e.message) || 'The request was not accepted.';
}

// What the agent writes into a run's error → what the person should read.
const RUN_ERRORS = [
  [/gateway restarted|harness no longer knows|restarted before/i, 'The assistant service restarted before this answer finished. Send the message again to retry.'],
  [/could not be loaded|model.*load/i, 'The model could not be started. Try again in a few minutes.'],
  [/gpu stopped serving|grant.*revoked|device.*(lost|unavailable)/i, 'The GPU running this job became unavailable, so the job stopped.'],
  [/did not stop in time/i, 'The job did not stop in time; it may still be finishing in the background.'],
  [/cancel/i, 'You cancelled this run.'],
  [/timed? ?out|deadline exceeded/i, 'The job took too long and was stopped.'],
  [/could not start the run/i, 'The job could not be started. Try again.'],
  [/run not found/i, 'This run no longer exists.'],
];

/** runErrorText words a run's error summary for its card. */
export function runErrorText(msg, status) {
  const s = String(msg || '');
  for (const [re, text] of RUN_ERRORS) if (re.test(s)) return text;
  if (!s) {
    if (status === 'interrupted') return 'The run was interrupted before it finished.';
    if (status === 'failed') return 'The run failed.';
    return '';
  }
  return tidy(s.replace(/^(error|err):\s*/i, '')) || 'The run failed.';
}
