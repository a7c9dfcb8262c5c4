// In-app dialogs (issue 34): a confirm that replaces window.confirm (styled, keyboard
// friendly, never blocking the page's timers), and the keyboard shortcuts' help. Both use
// <dialog>: focus is trapped, Escape closes, the page behind is inert.

/** confirmDialog asks a yes/no question; resolves true only for the confirming button. */
export function confirmDialog({ title, text, ok = 'OK', cancel = 'Cancel', danger = false }) {
  return new Promise((resolve) => {
    const d = document.createElement('dialog');
    d.className = 'dialog';
    d.setAttribute('aria-labelledby', 'dialog-title');
    const h = document.createElement('h2');
    h.id = 'dialog-title';
    h.textContent = title;
    const p = document.createElement('p');
    p.textContent = text;
    const no = document.createElement('button');
    no.type = 'button';
    no.textContent = cancel;
    const yes = document.createElement('button');
    yes.type = 'button';
    yes.textContent = ok;
    yes.className = danger ? 'danger' : 'primary';
    const row = document.createElement('div');
    row.className = 'dialog-actions';
    row.append(no, yes);
    d.append(h, p, row);
    let answer = false;
    no.addEventListener('click', () => d.close());
    yes.addEventListener('click', () => { answer = true; d.close(); });
    d.addEventListener('close', () => { d.remove(); resolve(answer); });
    document.body.append(d);
    d.showModal();
    no.focus(); // the safe choice has the focus
  });
}

export const SHORTCUTS = [
  ['Enter', 'Send the message'],
  ['Shift+Enter', 'New line'],
  ['↑ (in an empty message box)', 'Edit your last message'],
  ['Ctrl+Shift+O', 'New conversation'],
  ['Ctrl+K', 'Search conversations'],
  ['Esc', 'Stop the answer being written (or close a panel)'],
  ['Ctrl+Shift+C', 'Copy the last answer'],
  ['?', 'This help (outside a text field)'],
];

/** helpDialog lists the keyboard shortcuts. */
export function helpDialog() {
  const d = document.createElement('dialog');
  d.className = 'dialog help';
  d.setAttribute('aria-labelledby', 'help-title');
  const h = document.createElement('h2');
  h.id = 'help-title';
  h.textContent = 'Keyboard shortcuts';
  const dl = document.createElement('dl');
  for (const [k, v] of SHORTCUTS) {
    const dt = document.createElement('dt');
    const kbd = document.createElement('kbd');
    kbd.textContent = k;
    dt.append(kbd);
    const dd = document.createElement('dd');
    dd.textContent = v;
    dl.append(dt, dd);
  }
  const close = document.createElement('button');
  close.type = 'button';
  close.textContent = 'Close';
  close.addEventListener('click', () => d.close());
  const row = document.createElement('div');
  row.className = 'dialog-actions';
  row.append(close);
  d.append(h, dl, row);
  d.addEventListener('close', () => d.remove());
  document.body.append(d);
  d.showModal();
  close.focus();
  return d;
}
