// Applies the remembered colour theme before the page paints (a classic script in <head>:
// no flash of the wrong theme). "light" or "dark" override the system preference; no
// stored value follows it.
(function () {
  try {
    var t = localStorage.getItem('pa-theme');
    if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t;
  } catch (e) { /* storage blocked: follow the system */ }
})();
