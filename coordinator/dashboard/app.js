// SPDX-License-Identifier: MIT
// app.js — the meshtrain dashboard (docs/dashboard.md). One script for the four pages
// (body[data-page] = jobs | job | compare | workers). Every second it fetches the JSON API
// (docs/api.md) and updates the DOM in place; charts append only new metric points (?since_step=).
// Metric names come from the data (a job's latest_metrics), never from a list here: a name ending
// in "loss" goes on the loss chart, "accuracy" on the accuracy chart, "per_sec" on the throughput
// chart; a name starting with val_/eval_/test_ is an evaluation (one point per epoch), batch_ the
// last step's own value beside the epoch's running mean. Actions (cancel, resubmit) are POSTs the
// coordinator offers only with a token (the job's "actions" list). Text goes in with textContent,
// never innerHTML.
'use strict';
(function () {
  const PALETTE = ['#2563eb', '#16a34a', '#d97706', '#9333ea', '#dc2626', '#0891b2', '#db2777',
    '#65a30d', '#7c3aed', '#ea580c', '#0d9488', '#4f46e5'];
  const MAX_DRAWN = 2000; // points drawn per series; the full history stays in memory
  const FINAL = ['SUCCEEDED', 'FAILED', 'CANCELLED'];
  const CHARTS = [ // chart canvas id, caption, which metric names it shows
    { id: 'loss-chart', match: (n) => /loss$/.test(n) },
    { id: 'acc-chart', match: (n) => /accuracy$/.test(n) },
    { id: 'eps-chart', match: (n) => /per_sec(ond)?$/.test(n) },
  ];
  const isEval = (n) => /^(val|eval|test)_/.test(n);
  const isBatch = (n) => /^batch_/.test(n);
  const chartable = (n) => CHARTS.some((c) => c.match(n));

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;
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
  function fmtDuration(ms) {
    if (ms === null || ms === undefined || ms < 0) return '–';
    const s = Math.round(ms / 1000), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    if (h) return h + 'h ' + String(m).padStart(2, '0') + 'm';
    if (m) return m + 'm ' + String(s % 60).padStart(2, '0') + 's';
    return s + 's';
  }
  // submission to end (a final job) or to now
  function duration(j) {
    return (FINAL.includes(j.state) ? j.updated_at_ms : Date.now()) - j.submitted_at_ms;
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
  // An action (docs/api.md, "Actions"): a JSON POST, so no other site can send it for the user.
  async function postJSON(url, body) {
    const r = await fetch(url, { method: 'POST', credentials: 'same-origin', cache: 'no-store',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const reply = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(reply.error ? reply.error.code + ': ' + reply.error.message : 'HTTP ' + r.status);
    return reply;
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

  // ---------------------------------------------------------------- series and charts

  // One job's metric history, loaded once and then only new points (since_step); reloaded when the
  // job restarts (steps are redone) or a new metric name appears.
  function seriesLoader(id) {
    const s = { lastStep: -1, restarts: null, names: '', full: new Map() };
    s.update = async (job) => {
      const names = Object.keys(job.latest_metrics || {}).filter(chartable).sort();
      const key = names.join(',');
      if ((s.restarts !== null && job.restarts !== s.restarts) || key !== s.names) {
        s.lastStep = -1;
        s.full = new Map();
      }
      s.restarts = job.restarts;
      s.names = key;
      if (!names.length) return;
      const m = await getJSON('/api/v1/jobs/' + enc(id) + '/metrics?since_step=' + (s.lastStep + 1) +
        '&names=' + names.map(enc).join(',') + (s.lastStep < 0 ? '&max_points=' + MAX_DRAWN : ''));
      if (m.last_step !== null) s.lastStep = m.last_step;
      for (const [name, ser] of Object.entries(m.series)) {
        if (!s.full.has(name)) s.full.set(name, []);
        const f = s.full.get(name);
        for (let i = 0; i < ser.step.length; i++) f.push({ x: ser.step[i], y: ser.value[i] });
      }
    };
    return s;
  }

  // Every point while small; past MAX_DRAWN a stride sample that keeps the last point.
  function drawn(full) {
    if (full.length <= MAX_DRAWN) return full.slice();
    const stride = Math.ceil(full.length / MAX_DRAWN), out = [];
    for (let i = 0; i < full.length; i += stride) out.push(full[i]);
    if (out[out.length - 1] !== full[full.length - 1]) out.push(full[full.length - 1]);
    return out;
  }

  // TensorBoard's smoothing: an exponential moving average with weight w (0 = raw), debiased so
  // the first points are not pulled towards 0.
  function smooth(pts, w) {
    if (!w) return pts;
    let last = 0;
    return pts.map((p, i) => {
      last = last * w + (1 - w) * p.y;
      return { x: p.x, y: last / (1 - Math.pow(w, i + 1)) };
    });
  }

  // The smoothing control (a range input) shared by the charts of a page, kept across visits.
  function smoothingControl(onChange) {
    const input = $('smoothing'), out = $('smoothing-value');
    const saved = Number(localStorage.getItem('mt-smoothing'));
    input.value = saved >= 0 && saved < 1 ? saved : 0;
    const show = () => { out.textContent = Number(input.value).toFixed(2); };
    input.addEventListener('input', () => { localStorage.setItem('mt-smoothing', input.value); show(); onChange(); });
    show();
    return () => Number(input.value);
  }

  function makeChart(canvas) {
    return new Chart(canvas, {
      type: 'line',
      data: { datasets: [] },
      options: {
        animation: false, parsing: false, normalized: true, responsive: true, maintainAspectRatio: false,
        interaction: { mode: 'nearest', axis: 'x', intersect: false },
        scales: { x: { type: 'linear', title: { display: true, text: 'step' } } },
        plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } } },
      },
    });
  }

  // Set chart's datasets to `series` ([{key, label, color, points, eval, batch}]), smoothing the
  // per-step ones with weight w; keeps each dataset object across updates (Chart.js redraws in
  // place). Returns the raw point count.
  function setSeries(ch, series, w) {
    const old = new Map(ch.data.datasets.filter((d) => !d.marker).map((d) => [d.key, d]));
    let total = 0;
    ch.data.datasets = series.map((s) => {
      const d = old.get(s.key) || { key: s.key, tension: 0 };
      Object.assign(d, {
        label: s.label, borderColor: s.color, backgroundColor: s.color,
        borderWidth: s.batch ? 1 : 1.8, pointRadius: s.eval ? 2 : 0,
        data: drawn(s.eval ? s.points : smooth(s.points, w)),
      });
      if (s.batch) d.borderColor = d.backgroundColor = s.color + '80'; // the raw line, lighter
      total += s.points.length;
      return d;
    });
    return total;
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

  // ---------------------------------------------------------------- jobs page

  // The list's columns: key, header, cell, sort value. Metric columns are added from the data.
  const BASE_COLS = [
    { key: 'job_id', title: 'Job', sort: (j) => j.job_id,
      cell: (j) => el('td', null, el('a', { href: '/jobs/' + enc(j.job_id), textContent: j.job_id })) },
    { key: 'name', title: 'Name', sort: (j) => j.name, cell: (j) => el('td', { textContent: j.name }) },
    { key: 'state', title: 'State', sort: (j) => j.state, cell: (j) => el('td', null, stateBadge(j.state)) },
    { key: 'progress', title: 'Progress', sort: (j) => j.progress === null ? -1 : j.progress,
      cell: (j) => {
        const pct = j.progress === null ? null : Math.round(j.progress * 1000) / 10;
        return el('td', null, el('span', { className: 'bar' }, el('i', { style: 'width:' + (pct || 0) + '%' })),
          ' ', pct === null ? '–' : pct + '%');
      } },
    { key: 'step', title: 'Step', sort: (j) => j.step,
      cell: (j) => el('td', { textContent: j.step + (j.total_steps ? ' / ' + j.total_steps : '') }) },
    { key: 'duration', title: 'Duration', sort: duration,
      cell: (j) => el('td', { className: 'num', textContent: fmtDuration(duration(j)) }) },
  ];
  const TAIL_COLS = [
    { key: 'restarts', title: 'Restarts', sort: (j) => j.restarts, cell: (j) => el('td', { textContent: j.restarts }) },
    { key: 'updated', title: 'Updated', sort: (j) => j.updated_at_ms, cell: (j) => el('td', { textContent: fmtTime(j.updated_at_ms) }) },
    { key: 'reason', title: 'Reason', sort: (j) => j.error || j.reason,
      cell: (j) => el('td', { className: 'muted', textContent: j.error || j.reason }) },
  ];
  function metricCol(name) {
    const v = (j) => (j.latest_metrics || {})[name];
    return { key: 'm:' + name, title: name, metric: true, sort: (j) => (v(j) === undefined || v(j) === null ? -Infinity : v(j)),
      cell: (j) => el('td', { className: 'num', textContent: v(j) === undefined ? '' : fmtNum(v(j)) }) };
  }

  function jobsPage() {
    const view = { key: 'job_id', desc: true, picked: new Set(), jobs: [], total: 0, head: '' };
    $('filter').addEventListener('input', render);
    $('state-filter').addEventListener('change', render);
    $('compare-btn').addEventListener('click', () => {
      location.href = '/compare?jobs=' + [...view.picked].map(enc).join(',');
    });

    function columns() {
      const names = new Set();
      view.jobs.forEach((j) => Object.keys(j.latest_metrics || {}).forEach((n) => {
        if ((/loss$/.test(n) || /accuracy$/.test(n)) && !isBatch(n)) names.add(n);
      }));
      return BASE_COLS.concat([...names].sort().map(metricCol), TAIL_COLS);
    }

    function render() {
      const cols = columns();
      const text = $('filter').value.trim().toLowerCase(), st = $('state-filter').value;
      const col = cols.find((c) => c.key === view.key) || cols[0];
      const rows = view.jobs.filter((j) => (!st || j.state === st) &&
        (!text || [j.job_id, j.name, j.state, j.reason, j.error].some((s) => (s || '').toLowerCase().includes(text))));
      rows.sort((a, b) => {
        const x = col.sort(a), y = col.sort(b);
        const c = x < y ? -1 : x > y ? 1 : a.job_id < b.job_id ? -1 : 1;
        return view.desc ? -c : c;
      });
      const head = cols.map((c) => c.key).join('|') + '|' + view.key + view.desc;
      if (head !== view.head) { // the header changes only with the columns or the sort
        view.head = head;
        $('jobs').tHead.replaceChildren(el('tr', null, el('th', { className: 'pick' }),
          ...cols.map((c) => {
            const th = el('th', { textContent: c.title, title: 'sort by ' + c.title });
            th.dataset.key = c.key;
            if (c.metric) th.className = 'num';
            if (c.key === view.key) th.classList.add(view.desc ? 'sorted-desc' : 'sorted-asc');
            th.addEventListener('click', () => {
              view.desc = view.key === c.key ? !view.desc : c.metric || c.key === 'duration';
              view.key = c.key;
              render();
            });
            return th;
          })));
      }
      fill($('jobs').tBodies[0], rows.map((j) => {
        const box = el('input', { type: 'checkbox', className: 'pick', checked: view.picked.has(j.job_id),
          title: 'compare this job' });
        box.dataset.job = j.job_id;
        box.addEventListener('change', () => {
          if (box.checked) view.picked.add(j.job_id); else view.picked.delete(j.job_id);
          pickedChanged();
        });
        return el('tr', { id: 'job-' + j.job_id }, el('td', { className: 'pick' }, box), ...cols.map((c) => c.cell(j)));
      }));
      $('shown').textContent = rows.length === view.jobs.length ? '' : rows.length + ' shown';
      pickedChanged();
    }

    function pickedChanged() {
      const n = view.picked.size;
      $('compare-btn').disabled = n < 2;
      $('compare-btn').textContent = 'Compare' + (n ? ' ' + n + ' jobs' : '');
    }

    poll(async () => {
      const { jobs, total } = await getJSON('/api/v1/jobs?metrics=latest&limit=1000');
      view.jobs = jobs;
      const counts = {};
      jobs.forEach((j) => { counts[j.state] = (counts[j.state] || 0) + 1; });
      $('summary').textContent = (total > jobs.length ? 'the newest ' + jobs.length + ' of ' + total
        : jobs.length) + ' jobs' + Object.keys(counts).map((s) => ' · ' + counts[s] + ' ' + s.toLowerCase()).join('');
      $('empty').hidden = jobs.length > 0;
      const known = new Set(jobs.map((j) => j.job_id));
      view.picked.forEach((id) => { if (!known.has(id)) view.picked.delete(id); });
      render();
    });
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

  // The job's log: state changes with their reasons, checkpoints, and the current note, by time.
  function jobLog(job) {
    const lines = job.events.map((e) => ({ t: e.time_ms, text: e.state.padEnd(11) +
      (e.restart ? 'restart ' + e.restart + ', resumed from ' + (e.resume_step === null ? '?' : e.resume_step)
        : 'step ' + e.step) + (e.reason ? ' — ' + e.reason : '') }));
    job.checkpoints.forEach((c) => lines.push({ t: c.time_ms, text: 'CHECKPOINT'.padEnd(11) + 'step ' + c.step +
      (c.complete ? ' saved, ' + fmtBytes(c.size_bytes) + ' ' + c.checksum : ' being written') }));
    const last = job.events[job.events.length - 1];
    if (job.reason && (!last || last.reason !== job.reason))
      lines.push({ t: job.updated_at_ms, text: 'NOTE'.padEnd(11) + job.reason });
    if (job.error && (!last || last.reason !== job.error))
      lines.push({ t: job.updated_at_ms, text: 'ERROR'.padEnd(11) + job.error });
    lines.sort((a, b) => a.t - b.t);
    return lines.map((l) => new Date(l.t).toISOString().replace('T', ' ').slice(0, 23) + '  ' + l.text).join('\n');
  }

  function jobActions(id, getJob) {
    const msg = (text, err) => { $('action-msg').textContent = text; $('action-msg').className = err ? 'err' : 'muted'; };
    $('cancel-btn').addEventListener('click', () => { $('confirm').hidden = false; $('confirm-yes').focus(); });
    $('confirm-no').addEventListener('click', () => { $('confirm').hidden = true; });
    $('confirm-yes').addEventListener('click', async () => {
      $('confirm').hidden = true;
      try {
        const r = await postJSON('/api/v1/jobs/' + enc(id) + '/cancel', {});
        msg('Cancelled: the job is ' + r.state + '.');
      } catch (e) { msg('Cancel failed: ' + e.message, true); }
    });
    $('resubmit-btn').addEventListener('click', () => {
      const job = getJob();
      $('resubmit-spec').value = JSON.stringify(job.spec, null, 2);
      $('resubmit-name').value = job.name;
      $('resubmit-box').hidden = false;
    });
    $('resubmit-close').addEventListener('click', () => { $('resubmit-box').hidden = true; });
    $('resubmit-go').addEventListener('click', async () => {
      let spec;
      try { spec = JSON.parse($('resubmit-spec').value); } catch (e) { msg('The spec is not JSON: ' + e.message, true); return; }
      try {
        const r = await postJSON('/api/v1/jobs', { spec, name: $('resubmit-name').value });
        location.href = '/jobs/' + enc(r.job_id);
      } catch (e) { msg('Submit failed: ' + e.message, true); }
    });
  }

  function jobPage() {
    const id = decodeURIComponent(location.pathname.split('/')[2] || '');
    const charts = CHARTS.map((c) => makeChart($(c.id)));
    const loader = seriesLoader(id);
    let job = null;
    const weight = smoothingControl(() => drawCharts());
    $('job-id').textContent = id;
    document.title = 'meshtrain: ' + id;
    jobActions(id, () => job);

    function drawCharts() {
      if (!job) return;
      const markers = (job.restart_markers || []).filter((r) => r.resume_step !== null);
      charts.forEach((ch, k) => {
        const names = [...loader.full.keys()].filter(CHARTS[k].match).sort();
        const total = setSeries(ch, names.map((n, i) => ({ key: n, points: loader.full.get(n), color: PALETTE[i % PALETTE.length],
          eval: isEval(n), batch: isBatch(n),
          label: n + (isBatch(n) ? ' (each step)' : loader.full.has('batch_' + n) ? ' (epoch mean)' : '') })), weight());
        markRestarts(ch, markers);
        ch.canvas.dataset.points = total;
        ch.canvas.dataset.series = names.join(',');
        ch.canvas.dataset.lastStep = loader.lastStep;
        ch.update('none');
      });
    }

    // The workers' log lines (GET .../log), fetched after the last one seen, the newest 2000 kept.
    const wlog = { next: 0, lines: [] };
    async function workerLog() {
      for (let more = true; more;) {
        const r = await getJSON('/api/v1/jobs/' + enc(id) + '/log?after=' + wlog.next + '&limit=1000');
        wlog.lines.push(...r.lines);
        wlog.next = r.next;
        more = r.lines.length === 1000;
      }
      if (wlog.lines.length > 2000) wlog.lines.splice(0, wlog.lines.length - 2000);
      const box = $('worker-log');
      if (Number(box.dataset.lines) === wlog.lines.length && wlog.lines.length > 0) return;
      box.textContent = wlog.lines.length === 0 ? 'No lines from the workers yet.'
        : wlog.lines.map((l) => new Date(l.time_ms).toISOString().replace('T', ' ').slice(0, 23) + '  ' +
          l.worker_id.slice(0, 8) + ' #' + l.attempt + '  ' + l.level.toUpperCase().padEnd(5) + ' ' + l.text).join('\n');
      box.dataset.lines = wlog.lines.length;
      box.scrollTop = box.scrollHeight;
    }

    async function tick() {
      job = await getJSON('/api/v1/jobs/' + enc(id));
      await loader.update(job);
      await workerLog();
      drawCharts();
      const lm = job.latest_metrics, pick = (re) => Object.keys(lm).filter((n) => re.test(n) && !isEval(n) && !isBatch(n)).sort()[0];
      const lossName = pick(/loss$/), accName = pick(/accuracy$/), epsName = pick(/per_sec(ond)?$/);
      $('job-name').textContent = job.name;
      $('job-state').className = 'state ' + job.state;
      $('job-state').textContent = job.state;
      $('job-step').textContent = job.step + (job.total_steps ? ' / ' + job.total_steps : '');
      $('job-progress').textContent = job.progress === null ? '–' : (job.progress * 100).toFixed(1) + '%';
      $('job-duration').textContent = fmtDuration(duration(job));
      $('job-loss').textContent = lossName ? fmtNum(lm[lossName].value) : '–';
      $('job-accuracy').textContent = accName ? fmtNum(lm[accName].value) : '–';
      $('job-eps').textContent = epsName ? fmtNum(lm[epsName].value, 0) : '–';
      $('job-restarts').textContent = job.restarts;
      $('job-error').hidden = !job.error;
      $('job-error').textContent = job.error;
      $('job-stall').hidden = !job.diagnosis;
      $('job-stall').textContent = job.diagnosis ? 'Stalled: ' + job.diagnosis : '';
      $('job-reason').textContent = job.reason && job.reason !== job.error && !job.diagnosis ? 'Reason: ' + job.reason : '';
      const acts = job.actions || [];
      $('cancel-btn').hidden = !acts.includes('cancel');
      $('resubmit-btn').hidden = !acts.includes('resubmit');
      $('actions-off').hidden = acts.length > 0;
      if (!acts.includes('cancel')) $('confirm').hidden = true;
      if (!$('job-spec').textContent) $('job-spec').textContent = JSON.stringify(job.spec, null, 2);
      $('job-log').textContent = jobLog(job);
      fill($('events').tBodies[0], job.events.slice().reverse().map((e) => el('tr', e.restart ? { className: 'restart' } : null,
        el('td', { textContent: fmtTime(e.time_ms) }),
        el('td', null, stateBadge(e.state), e.restart ? el('span', { className: 'tag', textContent: 'restart ' + e.restart }) : ''),
        el('td', { textContent: e.restart ? 'resumed from ' + (e.resume_step === null ? '?' : e.resume_step) : e.step }),
        el('td', { textContent: e.reason }))));
      const dl = (c) => '/api/v1/jobs/' + enc(id) + '/checkpoint?step=' + c.step;
      fill($('checkpoints').tBodies[0], job.checkpoints.slice().reverse().map((c) => el('tr', null,
        el('td', { textContent: c.step }), el('td', { textContent: c.complete ? 'yes' : 'writing' }),
        el('td', { textContent: fmtBytes(c.size_bytes) }),
        el('td', null, c.complete ? el('a', { href: dl(c), download: id + '-step-' + c.step + '.ckpt', textContent: 'download' }) : ''),
        el('td', { className: 'muted', textContent: c.location }))));
      const latest = job.checkpoints.filter((c) => c.complete).pop();
      $('model-download').hidden = !latest;
      $('model-safetensors').hidden = !latest;
      if (latest) {
        $('model-safetensors').href = '/api/v1/jobs/' + enc(id) + '/model?step=' + latest.step;
        $('model-safetensors').download = id + '-step-' + latest.step + '.safetensors';
        $('model-safetensors').textContent = 'Download model (safetensors, step ' + latest.step + ')';
        $('model-download').href = dl(latest);
        $('model-download').download = id + '-step-' + latest.step + '.ckpt';
        $('model-download').textContent = 'Download checkpoint (step ' + latest.step + ', ' + fmtBytes(latest.size_bytes) + ')';
      }
      $('model-none').hidden = !!latest;
      $('export-cmd').textContent = ['meshtrain export ' + id + ' -o model.safetensors',
        'meshtrain export ' + id + ' --layout torch -o model_torch.safetensors',
        'meshtrain export ' + id + ' --format onnx -o model.onnx'].join('\n');
      $('job-digest').textContent = job.digest ? job.digest.digest + ' (step ' + job.digest.step + ')' : 'none yet';
      drawMesh(job);
    }
    poll(tick);
  }

  // ---------------------------------------------------------------- compare page

  // /compare?jobs=a,b,...: the chosen jobs' curves of one metric per chart, overlaid, one colour
  // per job; the metrics are chosen from the names the jobs have.
  function comparePage() {
    const ids = (new URLSearchParams(location.search).get('jobs') || '').split(',').filter(Boolean);
    const colors = new Map(ids.map((id, i) => [id, PALETTE[i % PALETTE.length]]));
    const loaders = new Map(ids.map((id) => [id, seriesLoader(id)]));
    const jobs = new Map();
    const charts = [makeChart($('cmp-chart-a')), makeChart($('cmp-chart-b'))];
    const selects = [$('cmp-metric-a'), $('cmp-metric-b')];
    const weight = smoothingControl(() => draw());
    selects.forEach((s) => s.addEventListener('change', () => { s.dataset.chosen = s.value; draw(); }));
    $('cmp-empty').hidden = ids.length >= 2;
    document.title = 'meshtrain: compare ' + ids.join(', ');

    function chooseDefaults(names) {
      // a: the training loss; b: the last accuracy by name (val_/eval_ sort after the train one)
      const loss = names.filter((n) => /loss$/.test(n) && !isEval(n) && !isBatch(n));
      const acc = names.filter((n) => /accuracy$/.test(n));
      return [loss[0] || names[0], acc[acc.length - 1] || names[1] || names[0]];
    }

    function draw() {
      const names = [...new Set([...loaders.values()].flatMap((l) => [...l.full.keys()]))].sort();
      const defaults = chooseDefaults(names);
      selects.forEach((s, k) => {
        const want = s.dataset.chosen || defaults[k];
        if ([...s.options].map((o) => o.value).join(',') !== names.join(','))
          s.replaceChildren(...names.map((n) => el('option', { value: n, textContent: n })));
        if (want && names.includes(want)) s.value = want;
      });
      charts.forEach((ch, k) => {
        const name = selects[k].value;
        const total = setSeries(ch, ids.filter((id) => loaders.get(id).full.has(name)).map((id) => ({
          key: id, points: loaders.get(id).full.get(name), color: colors.get(id), eval: isEval(name), batch: false,
          label: id + (jobs.get(id) && jobs.get(id).name ? ' ' + jobs.get(id).name : '') })), weight());
        ch.canvas.dataset.points = total;
        ch.canvas.dataset.jobs = ch.data.datasets.map((d) => d.key).join(',');
        ch.canvas.dataset.metric = name;
        ch.update('none');
      });
      fill($('cmp-table').tBodies[0], ids.filter((id) => jobs.has(id)).map((id) => {
        const j = jobs.get(id), lm = j.latest_metrics || {};
        const v = (n) => (lm[n] ? fmtNum(lm[n].value) : '–');
        return el('tr', null, el('td', null, el('i', { className: 'swatch', style: 'background:' + colors.get(id) }),
          el('a', { href: '/jobs/' + enc(id), textContent: id })), el('td', { textContent: j.name }),
        el('td', null, stateBadge(j.state)), el('td', { textContent: j.step }),
        el('td', { textContent: fmtDuration(duration(j)) }),
        el('td', { className: 'num', textContent: v(selects[0].value) }), el('td', { className: 'num', textContent: v(selects[1].value) }));
      }));
      $('cmp-col-a').textContent = selects[0].value || 'metric';
      $('cmp-col-b').textContent = selects[1].value || 'metric';
    }

    poll(async () => {
      await Promise.all(ids.map(async (id) => {
        const j = await getJSON('/api/v1/jobs/' + enc(id));
        jobs.set(id, j);
        await loaders.get(id).update(j);
      }));
      draw();
    });
  }

  const page = document.body.dataset.page;
  if (page === 'jobs') jobsPage();
  else if (page === 'workers') poll(workersPage);
  else if (page === 'job') jobPage();
  else if (page === 'compare') comparePage();
})();
