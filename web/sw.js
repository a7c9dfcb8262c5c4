// Caches only an explicit list of public shell files (config.js among them: the page's
// public settings, endpoint and project id, without which an offline load cannot start). API, auth (Appwrite /v1), file and
// every other request passes straight to the network: they are never cached.
const CACHE = 'pa-shell-v10';
const SHELL = ['/', '/index.html', '/config.js', '/styles.css', '/favicon.svg', '/manifest.json', '/icon.svg', '/js/main.js', '/js/api.js', '/js/auth.js', '/js/admin.js', '/js/feed.js', '/js/follow.js',
  '/js/render.js', '/js/sse.js', '/js/stream.js', '/js/view.js', '/js/errors.js', '/js/theme.js', '/js/attach.js',
  '/js/branch.js', '/js/export.js', '/js/dialog.js', '/js/search.js',
  '/vendor/appwrite.js', '/vendor/marked.js', '/vendor/dompurify.js', '/vendor/highlight.js'];

self.addEventListener('install', (e) => e.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting())));
self.addEventListener('activate', (e) => e.waitUntil(caches.keys().then((ks) => Promise.all(ks.filter((k) => k !== CACHE).map((k) => caches.delete(k)))).then(() => self.clients.claim())));
self.addEventListener('fetch', (e) => {
  const url = new URL(e.request.url);
  if (e.request.method !== 'GET' || url.origin !== self.location.origin || !SHELL.includes(url.pathname)) return;
  // Network first (the shell changes with deployments), the cache when offline.
  e.respondWith(fetch(e.request).then((res) => {
    const copy = res.clone();
    caches.open(CACHE).then((c) => c.put(e.request, copy));
    return res;
  }).catch(() => caches.match(e.request)));
});
