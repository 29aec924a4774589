// SPDX-License-Identifier: MIT
// app.js — the meshtrain dashboard (docs/dashboard.md). One script for the three pages
// (body[data-page] = jobs | job | workers). Every second it fetches the read-only JSON API
// (docs/api.md) and updates the DOM in place; the job page appends only new metric points
// (?since_step=) to its Chart.js charts. Text goes in with textContent, never innerHTML.
'use strict';
(function () {
  const PALETTE = ['#2563eb', '#16a34a', '#d97706', '#9333ea', '#dc2626', '#0891b2', '#db2777',
    '#65a30d', '#7c3aed', '#ea580c', '#0d9488', '#4f46e5'];
  const MAX_DRAWN = 2000; // points drawn per series; the full history stays in memory

  const $ = (id) => document.getElementById(id);
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) Object.assign(e, props);
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  function fmtTime(ms) { return ms ? new Date(ms).toLocaleString() : '–'; }
  function fmtNum(v, d) {
    if (v === null || v === undefined) return '–';
    return Math.abs(v) >= 1000 ? Math.round(v).toLocaleString() : Number(v).toFixed(d === undefined ? 4 : d);
  }
  function fmtBytes(n) {
    const u = ['B', 'KB', 'MB', 'GB', 'TB']; let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + ' ' + u[i];
  }
  function stateBadge(s) { return el('span', { className: 'state ' + s, textContent: s }); }
  function fill(tbody, rows) { tbody.replaceChildren(...rows); }
  function colorMap(keys) {
    const m = new Map();
    [...new Set(keys)].sort().forEach((k, i) => m.set(k, PALETTE[i % PALETTE.length]));
    return m;
  }
  function legend(box, map) {
    box.replaceChildren(...[...map].map(([k, c]) => el('span', null, el('i', { style: 'background:' + c }), k)));
  }

  async function getJSON(url) {
    const r = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
    if (r.status === 401) { location.href = '/login'; throw new Error('sign-in required'); }
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.code + ': ' + body.error.message : 'HTTP ' + r.status);
    return body;
  }
  function poll(fn) {
    const tick = async () => {
      try {
        await fn();
        document.body.dataset.updates = Number(document.body.dataset.updates || 0) + 1;
        $('status').className = 'status';
        $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
      } catch (e) {
        $('status').className = 'status err';
        $('status').textContent = e.message;
      }
      setTimeout(tick, 1000);
    };
    tick();
  }

  // ---------------------------------------------------------------- jobs page
  async function jobsPage() {
    const { jobs, total } = await getJSON('/api/v1/jobs'); // the first page (docs/api.md)
    const counts = {};
    jobs.forEach((j) => { counts[j.state] = (counts[j.state] || 0) + 1; });
    $('summary').textContent = (total > jobs.length ? 'the first ' + jobs.length + ' of ' + total
                                                     : jobs.length) + ' jobs' +
      Object.keys(counts).map((s) => ' · ' + counts[s] + ' ' + s.toLowerCase()).join('');
    $('empty').hidden = jobs.length > 0;
    fill($('jobs').tBodies[0], jobs.map((j) => {
      const pct = j.progress === null ? null : Math.round(j.progress * 1000) / 10;
      const bar = el('span', { className: 'bar' }, el('i', { style: 'width:' + (pct || 0) + '%' }));
      return el('tr', { id: 'job-' + j.job_id },
        el('td', null, el('a', { href: '/jobs/' + encodeURIComponent(j.job_id), textContent: j.job_id })),
        el('td', { textContent: j.name }),
        el('td', null, stateBadge(j.state)),
        el('td', null, bar, ' ', pct === null ? '–' : pct + '%'),
        el('td', { textContent: j.step + (j.total_steps ? ' / ' + j.total_steps : '') }),
        el('td', { textContent: j.restarts }),
        el('td', { textContent: fmtTime(j.updated_at_ms) }),
        el('td', { className: 'muted', textContent: j.error || j.reason }));
    }));
  }

  // ---------------------------------------------------------------- workers page
  async function workersPage() {
    const [{ workers }, mesh] = await Promise.all([getJSON('/api/v1/workers'), getJSON('/api/v1/mesh')]);
    $('empty').hidden = workers.length > 0;
    $('summary').textContent = workers.filter((w) => w.state === 'alive').length + ' alive of ' +
      workers.length + ' workers · ' + mesh.devices_busy + ' devices busy, ' + mesh.devices_free + ' free';
    fill($('workers').tBodies[0], workers.map((w) => el('tr', null,
      el('td', { textContent: w.name }), el('td', null, stateBadge(w.state)),
      el('td', { textContent: w.host }), el('td', { textContent: w.pid }),
      el('td', { textContent: w.devices.map((d) => d.kind + ':' + d.index + (d.health === 'ok' ? '' : ' (' + d.health + ')')).join(', ') }),
      el('td', { textContent: w.version }), el('td', { textContent: fmtTime(w.last_heartbeat_ms) }))));
    const jobs = colorMap(mesh.workers.flatMap((w) => w.devices.filter((d) => d.job_id).map((d) => d.job_id)));
    const width = Math.max(1, ...mesh.workers.map((w) => w.devices.length));
    const box = $('cluster');
    box.style.gridTemplateColumns = 'repeat(' + (width + 1) + ', auto)';
    box.replaceChildren(...mesh.workers.flatMap((w) => [
      el('div', { className: 'muted', textContent: w.name, style: 'align-self:center;padding-right:.5em' }),
      ...w.devices.map((d) => {
        const c = el('div', { className: 'dev' + (d.job_id ? '' : ' free') + (d.health === 'ok' && w.state === 'alive' ? '' : ' bad'),
          title: w.name + ' ' + d.kind + ':' + d.index + (d.job_id ? ' — ' + d.job_id : ' — free') },
        el('b', { textContent: d.kind + ':' + d.index }), d.job_id || (w.state === 'alive' ? 'free' : w.state));
        if (d.job_id) c.style.background = jobs.get(d.job_id);
        return c;
      }),
      ...Array(width - w.devices.length).fill(0).map(() => el('div')),
    ]));
    legend($('legend'), jobs);
  }

  // ---------------------------------------------------------------- job page
  const SERIES = {
    // Keras's names (docs/job-spec.md "Loss and metrics"): training, val_ and test_ figures
    'loss-chart': [['loss', 'loss'], ['val_loss', 'val_loss'], ['test_loss', 'test_loss']],
    'acc-chart': [['accuracy', 'accuracy'], ['val_accuracy', 'val_accuracy'], ['test_accuracy', 'test_accuracy']],
    'eps-chart': [['examples_per_sec', 'examples/s']],
  };

  function makeChart(canvasId) {
    const ds = SERIES[canvasId].map(([key, label], i) => ({
      label, key, data: [], full: [], borderColor: PALETTE[i], backgroundColor: PALETTE[i],
      borderWidth: 1.5, pointRadius: key.startsWith('val_') || key.startsWith('test_') ? 2 : 0, tension: 0,
    }));
    return new Chart($(canvasId), {
      type: 'line',
      data: { datasets: ds },
      options: {
        animation: false, parsing: false, normalized: true, responsive: true, maintainAspectRatio: false,
        interaction: { mode: 'nearest', axis: 'x', intersect: false },
        scales: { x: { type: 'linear', title: { display: true, text: 'step' } } },
        plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } } },
      },
    });
  }

  // Every point while small; past MAX_DRAWN a stride sample that keeps the last point.
  function drawn(full) {
    if (full.length <= MAX_DRAWN) return full.slice();
    const stride = Math.ceil(full.length / MAX_DRAWN), out = [];
    for (let i = 0; i < full.length; i += stride) out.push(full[i]);
    if (out[out.length - 1] !== full[full.length - 1]) out.push(full[full.length - 1]);
    return out;
  }

  function drawMesh(job) {
    const pl = job.placement;
    const workers = colorMap(pl.map((p) => p.worker_id));
    const box = $('mesh');
    if (!pl.length) { box.replaceChildren(el('p', { className: 'muted', textContent: 'not placed' })); legend($('mesh-legend'), new Map()); return; }
    const nd = Math.max(...pl.map((p) => p.coords.length));
    const dims = Array(nd).fill(1);
    pl.forEach((p) => p.coords.forEach((c, i) => { dims[i] = Math.max(dims[i], c + 1); }));
    const cols = nd >= 2 ? dims.slice(1).reduce((a, b) => a * b, 1) : (nd === 1 ? dims[0] : pl.length);
    box.style.gridTemplateColumns = 'repeat(' + cols + ', auto)';
    const total = nd ? dims.reduce((a, b) => a * b, 1) : pl.length;
    const cells = Array(Math.ceil(total / cols) * cols).fill(null);
    pl.forEach((p) => {
      let idx = p.device;
      if (nd >= 1) { idx = 0; for (let i = 0; i < nd; i++) idx = idx * dims[i] + (p.coords[i] || 0); }
      if (idx < cells.length) cells[idx] = p;
    });
    box.replaceChildren(...cells.map((p) => {
      if (!p) return el('div');
      const c = el('div', { className: 'dev', title: 'device ' + p.device + ' on ' + p.worker_id + ':' + p.local_index },
        el('b', { textContent: 'dev ' + p.device }), p.worker_id + ':' + p.local_index, '(' + p.coords.join(',') + ')');
      c.style.background = workers.get(p.worker_id);
      return c;
    }));
    legend($('mesh-legend'), workers);
  }

  // A restart marker: a dashed vertical line at the step the restarted attempt resumed from
  // (the job's restart_markers, docs/api.md), spanning the chart's metric values. Chart.js 3.9
  // from Debian has no annotation plugin, so each marker is a dataset of two points.
  function markRestarts(ch, markers) {
    const metric = ch.data.datasets.filter((d) => !d.marker);
    let lo = Infinity, hi = -Infinity;
    metric.forEach((d) => d.data.forEach((p) => { if (p.y < lo) lo = p.y; if (p.y > hi) hi = p.y; }));
    const shown = lo <= hi ? markers : [];
    ch.data.datasets = metric.concat(shown.map((r) => ({
      label: 'restart ' + r.restart, marker: true, borderColor: '#dc2626', backgroundColor: '#dc2626',
      borderDash: [4, 3], borderWidth: 1.5, pointRadius: 0, tension: 0,
      data: [{ x: r.resume_step, y: lo }, { x: r.resume_step, y: hi }],
    })));
    ch.canvas.dataset.restarts = shown.map((r) => r.resume_step).join(',');
  }

  function jobPage() {
    const id = decodeURIComponent(location.pathname.split('/')[2] || '');
    const charts = Object.keys(SERIES).map(makeChart);
    let lastStep = -1, restarts = null;
    $('job-id').textContent = id;
    document.title = 'meshtrain: ' + id;

    async function tick() {
      const job = await getJSON('/api/v1/jobs/' + encodeURIComponent(id));
      if (restarts !== null && job.restarts !== restarts) { // steps are redone: reload the history
        lastStep = -1;
        charts.forEach((ch) => ch.data.datasets.forEach((d) => { d.full = []; }));
      }
      restarts = job.restarts;
      const m = await getJSON('/api/v1/jobs/' + encodeURIComponent(id) + '/metrics?since_step=' + (lastStep + 1) +
        '&names=' + Object.values(SERIES).flat().map(([key]) => key).join(',') + (lastStep < 0 ? '&max_points=' + MAX_DRAWN : ''));
      if (m.last_step !== null) lastStep = m.last_step;
      const markers = (job.restart_markers || []).filter((r) => r.resume_step !== null);
      charts.forEach((ch) => {
        let total = 0;
        ch.data.datasets.forEach((d) => {
          if (d.marker) return;
          const s = m.series[d.key];
          if (s) for (let i = 0; i < s.step.length; i++) d.full.push({ x: s.step[i], y: s.value[i] });
          d.data = drawn(d.full);
          total += d.full.length;
        });
        markRestarts(ch, markers);
        ch.canvas.dataset.points = total;
        ch.canvas.dataset.lastStep = lastStep;
        ch.update('none');
      });
      const lm = job.latest_metrics;
      $('job-name').textContent = job.name;
      $('job-state').className = 'state ' + job.state;
      $('job-state').textContent = job.state;
      $('job-step').textContent = job.step + (job.total_steps ? ' / ' + job.total_steps : '');
      $('job-progress').textContent = job.progress === null ? '–' : (job.progress * 100).toFixed(1) + '%';
      $('job-loss').textContent = lm.loss ? fmtNum(lm.loss.value) : '–';
      $('job-accuracy').textContent = lm.accuracy ? fmtNum(lm.accuracy.value) : '–';
      $('job-eps').textContent = lm.examples_per_sec ? fmtNum(lm.examples_per_sec.value, 0) : '–';
      $('job-restarts').textContent = job.restarts;
      $('job-error').hidden = !job.error;
      $('job-error').textContent = job.error;
      $('job-stall').hidden = !job.diagnosis;
      $('job-stall').textContent = job.diagnosis ? 'Stalled: ' + job.diagnosis : '';
      $('job-reason').textContent = job.reason && job.reason !== job.error && !job.diagnosis ? 'Reason: ' + job.reason : '';
      fill($('events').tBodies[0], job.events.slice().reverse().map((e) => el('tr', e.restart ? { className: 'restart' } : null,
        el('td', { textContent: fmtTime(e.time_ms) }),
        el('td', null, stateBadge(e.state), e.restart ? el('span', { className: 'tag', textContent: 'restart ' + e.restart }) : ''),
        el('td', { textContent: e.restart ? 'resumed from ' + (e.resume_step === null ? '?' : e.resume_step) : e.step }),
        el('td', { textContent: e.reason }))));
      fill($('checkpoints').tBodies[0], job.checkpoints.slice().reverse().map((c) => el('tr', null,
        el('td', { textContent: c.step }), el('td', { textContent: c.complete ? 'yes' : 'writing' }),
        el('td', { textContent: fmtBytes(c.size_bytes) }), el('td', { textContent: c.location }))));
      drawMesh(job);
    }
    poll(tick);
  }

  const page = document.body.dataset.page;
  if (page === 'jobs') poll(jobsPage);
  else if (page === 'workers') poll(workersPage);
  else if (page === 'job') jobPage();
})();
