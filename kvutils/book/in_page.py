"""The scripts the browser check (kvutils.book.browser_check) runs inside a page, through
Playwright's `page.evaluate`: each returns what a reader would see, as plain data."""

# Runs in the page: how wide its tables and charts are laid out in the text column (after every
# Plotly chart has been resized to the window, as Plotly's responsive mode does on a resize).
LAYOUT_STATE = """async () => {
  const column = document.querySelector('article.bd-article') || document.querySelector('main')
    || document.body;
  const plots = [...column.querySelectorAll('.js-plotly-plot')];
  if (window.Plotly) { await Promise.all(plots.map(p => Plotly.Plots.resize(p))); }
  const style = getComputedStyle(column);
  const box = column.getBoundingClientRect();
  const left = box.left + parseFloat(style.paddingLeft), right = box.right - parseFloat(style.paddingRight);
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.classList.length ? '.' + [...el.classList].join('.') : '');
  const overflow = el => {  // el or a box around it, up to the column, whose content is wider than it
    const out = [];
    for (let e = el; e; e = e.parentElement) {
      if (e.scrollWidth > e.clientWidth + 1)
        out.push(`${name(e)}: ${e.scrollWidth} px of content in ${e.clientWidth} px`);
      if (e === column) break;
    }
    const r = el.getBoundingClientRect();
    if (r.left < left - 1 || r.right > right + 1)
      out.push(`${name(el)}: spans ${Math.round(r.left)}-${Math.round(r.right)} px, ` +
               `the column ${Math.round(left)}-${Math.round(right)} px`);
    return out;
  };
  const outside = (inner, outer) => inner.width > 0 && (
    inner.left < outer.left - 1 || inner.right > outer.right + 1 ||
    inner.top < outer.top - 1 || inner.bottom > outer.bottom + 1);
  return {
    column: Math.round(right - left),
    tables: [...column.querySelectorAll('table')].map(t => ({
      label: [...t.querySelectorAll('th')].slice(0, 3).map(h => h.textContent.trim()).join(' | ')
        .slice(0, 80),
      overflow: overflow(t)})),
    charts: plots.map(p => {
      const svg = p.querySelector('.main-svg').getBoundingClientRect();
      const texts = [...p.querySelectorAll('.infolayer text[class$="title"], .legend')];
      return {
        id: p.id || (p.closest('[id]') || {}).id || 'chart',
        width: Math.round(p.getBoundingClientRect().width),
        plot: p._fullLayout ? Math.round(p._fullLayout._size.w) : 0, overflow: overflow(p),
        cut: texts.filter(t => outside(t.getBoundingClientRect(), svg)).map(t =>
          `${t.classList.contains('legend') ? 'legend' : t.getAttribute('class')} `
          + `"${t.textContent.slice(0, 50)}"`)};
    }),
  };
}"""


# Runs in the page: what a reader sees of images, formulas and tables.
PAGE_STATE = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const images = [...document.querySelectorAll('img')].map(i => ({
    src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0 && i.naturalHeight > 0}));
  const maths = [...document.querySelectorAll('.math')];
  return {
    images,
    maths: maths.length,
    typeset: maths.filter(m => m.querySelector('mjx-container')).length,
    mathErrors: document.querySelectorAll('mjx-merror').length,
    tables: document.querySelectorAll('article table, main table').length,
    truncated: [...document.querySelectorAll('td')]
      .filter(td => td.textContent.trim().endsWith('...')).length,
    hrefs: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
    charts: [...document.querySelectorAll('.kvutils-plotly[id^="kvutils-chart-"]')].map(c => ({
      id: c.id, points: c.querySelectorAll('.scatterlayer .point').length})),
  };
}"""


# Runs in the page: the explorer's controls and what its Plotly figure holds now.
EXPLORER_STATE = """() => {
  const root = document.getElementById('attention-explorer');
  const gd = root.querySelector('.ae-plot');
  const controls = {};
  root.querySelectorAll('[data-control]').forEach(el => {
    controls[el.dataset.control] = {
      tag: el.tagName.toLowerCase(), type: el.type, value: el.value,
      options: el.tagName === 'SELECT' ? [...el.options].map(o => o.value) : null,
      min: el.min === undefined ? null : el.min, max: el.max === undefined ? null : el.max};
  });
  return {
    draws: Number(root.dataset.draws || 0), controls,
    traces: (gd.data || []).map(t => ({type: t.type, x: t.x, y: t.y, z: t.z, text: t.text})),
    title: gd.layout && gd.layout.title ? gd.layout.title.text : null,
    annotations: gd.layout ? (gd.layout.annotations || []).map(a => a.text) : [],
  };
}"""
