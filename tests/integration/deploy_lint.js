// SPDX-License-Identifier: MIT
// deploy_lint.js — offline checks of the Docker compose file and the
// Kubernetes manifests, run by test_deploy_files.sh with NODE_PATH pointing at
// a node_modules that holds js-yaml and kubernetes-models@4.
//   node deploy_lint.js HELP_DIR COMPOSE_YML K8S_YAML...
// HELP_DIR holds <program>.txt (the --help of each program): every --flag a
// compose command or a k8s container passes must appear there. Prints one line
// per object checked; exits 1 with "FAIL: ..." lines when anything is wrong.
'use strict';
const fs = require('fs');
const path = require('path');
const yaml = require('js-yaml');

const [helpDir, composeFile, ...k8sFiles] = process.argv.slice(2);
let failures = 0;
const fail = (what, msg) => { failures++; console.log(`FAIL: ${what}: ${msg}`); };
const ok = (what) => console.log(`ok   ${what}`);

// every "--flag" in argv must be documented in the program's --help
function checkFlags(what, argv) {
    const prog = path.basename(argv[0]);
    const helpFile = path.join(helpDir, `${prog}.txt`);
    if (!fs.existsSync(helpFile)) return fail(what, `runs unknown program ${prog}`);
    const help = fs.readFileSync(helpFile, 'utf8');
    for (const a of argv.slice(1)) {
        if (typeof a === 'string' && a.startsWith('--') && !help.includes(`  ${a.split('=')[0]} `))
            fail(what, `${prog} has no option ${a}`);
    }
}
// YAML merge keys ("<<: *anchor"), which js-yaml 4 leaves as a plain key
function merged(o) {
    if (!o || typeof o !== 'object' || !('<<' in o)) return o;
    const { '<<': base, ...rest } = o;
    return { ...base, ...rest };
}

// ---------------------------------------------------------------- compose
const compose = yaml.load(fs.readFileSync(composeFile, 'utf8'));
const services = Object.fromEntries(Object.entries(compose.services || {}).map(([k, v]) => [k, merged(v)]));
const coord = services.coordinator;
if (!coord) fail('compose', 'no coordinator service');
else {
    checkFlags('compose coordinator', coord.command);
    const vol = (coord.volumes || []).map((v) => String(v).split(':'));
    if (!vol.some(([src, dst]) => compose.volumes && src in compose.volumes && dst === '/var/lib/meshtrain'))
        fail('compose coordinator', 'state dir /var/lib/meshtrain is not a named volume');
    const sd = coord.command.indexOf('--state-dir');
    if (sd < 0 || coord.command[sd + 1] !== '/var/lib/meshtrain') fail('compose coordinator', '--state-dir');
    for (const p of ['7400:7400', '7480:7480'])
        if (!(coord.ports || []).includes(p)) fail('compose coordinator', `port ${p} not published`);
    ok('compose coordinator');
}
const workers = Object.entries(services).filter(([, s]) => (s.command || [])[0] === 'meshtrain-worker');
if (workers.length < 2) fail('compose', `${workers.length} worker services, want at least 2`);
const names = new Set();
for (const [k, s] of workers) {
    checkFlags(`compose ${k}`, s.command);
    const n = s.command[s.command.indexOf('--name') + 1];
    if (names.has(n)) fail(`compose ${k}`, `duplicate worker name ${n}`);
    names.add(n);
    if (!s.environment || !/^tcp:\/\/coordinator:7400$/.test(s.environment.MESHTRAIN_COORDINATOR || ''))
        fail(`compose ${k}`, 'MESHTRAIN_COORDINATOR does not name the coordinator service');
    if (!s.depends_on || !s.depends_on.coordinator) fail(`compose ${k}`, 'does not depend on coordinator');
    ok(`compose ${k}`);
}
for (const [k, s] of Object.entries(services)) {
    const secrets = (s.secrets || []).map((x) => (typeof x === 'string' ? x : x.source));
    if (!secrets.includes('meshtrain_token')) fail(`compose ${k}`, 'no meshtrain_token secret');
    const tf = s.command.indexOf('--token-file');
    if (tf < 0 || s.command[tf + 1] !== '/run/secrets/meshtrain_token') fail(`compose ${k}`, 'token file is not the secret');
}
// datasets: every service mounts one read-only at /data; workers accept files under it
for (const [k, s] of Object.entries(services)) {
    if (!(s.volumes || []).some((v) => /:\/data:ro$/.test(String(v))))
        fail(`compose ${k}`, 'no dataset volume mounted read-only at /data');
    const a = s.command;
    if (a[0] === 'meshtrain-worker' && !a.some((x, i) => x === '--data-root' && a[i + 1] === '/data'))
        fail(`compose ${k}`, 'no --data-root /data');
}
if (!compose.secrets || !compose.secrets.meshtrain_token || !compose.secrets.meshtrain_token.file)
    fail('compose', 'secret meshtrain_token has no file');

// ---------------------------------------------------------------- kubernetes
const models = {
    v1: require('kubernetes-models/v1'),
    'apps/v1': require('kubernetes-models/apps/v1'),
};
const objs = [];
for (const f of k8sFiles) {
    const raw = fs.readFileSync(f, 'utf8');
    for (const doc of yaml.loadAll(raw)) {
        if (!doc) continue;
        const what = `k8s ${path.basename(f)} ${doc.kind}/${doc.metadata && doc.metadata.name}`;
        const group = models[doc.apiVersion];
        const Model = group && group[doc.kind];
        if (!Model) { fail(what, `unknown apiVersion/kind ${doc.apiVersion} ${doc.kind}`); continue; }
        try { new Model(doc).validate(); } catch (e) { fail(what, `schema: ${e.message}`); continue; }
        objs.push({ what, doc, raw });
        ok(`${what} (schema)`);
    }
}
const find = (kind, name) => objs.find((o) => o.doc.kind === kind && o.doc.metadata.name === name);
const dsPvc = find('PersistentVolumeClaim', 'meshtrain-datasets');
if (!dsPvc || !dsPvc.doc.spec.accessModes.includes('ReadOnlyMany'))
    fail('k8s', 'no ReadOnlyMany PersistentVolumeClaim meshtrain-datasets');
// the datasets claim is mounted read-only at /data in container c of o
function datasetChecks(o, c) {
    const v = (o.doc.spec.template.spec.volumes || []).find((x) => x.persistentVolumeClaim &&
        x.persistentVolumeClaim.claimName === 'meshtrain-datasets');
    const m = v && (c.volumeMounts || []).find((x) => x.name === v.name);
    if (!v || !v.persistentVolumeClaim.readOnly || !m || m.mountPath !== '/data' || !m.readOnly)
        fail(o.what, 'meshtrain-datasets is not mounted read-only at /data');
}
function podChecks(o, container) {
    const spec = o.doc.spec.template.spec;
    const c = spec.containers.find((x) => x.name === container);
    if (!c) return fail(o.what, `no container ${container}`);
    checkFlags(o.what, [...c.command, ...(c.args || [])]);
    if (!c.resources || !c.resources.requests || !c.resources.requests.cpu || !c.resources.requests.memory)
        fail(o.what, 'no cpu/memory requests');
    const sec = (spec.volumes || []).find((v) => v.secret && v.secret.secretName === 'meshtrain-token');
    // YAML 1.1 (kubectl) reads 0400 as octal 256; js-yaml's YAML 1.2 reads 400
    if (!sec || !(sec.secret.defaultMode === 256 || sec.secret.defaultMode === 400) || !/defaultMode: 0400/.test(o.raw))
        fail(o.what, 'token Secret not mounted with defaultMode 0400');
    const args = c.args || [];
    const tf = args[args.indexOf('--token-file') + 1];
    const init = (spec.initContainers || []).find((x) => x.command && x.command.includes(tf));
    if (!init || !init.command.includes('0400')) fail(o.what, `nothing puts a 0400 token at ${tf}`);
    const sc = spec.securityContext || {};
    if (!sc.runAsNonRoot || !sc.runAsUser) fail(o.what, 'not run as a non-root user');
    return c;
}
const dep = find('Deployment', 'meshtrain-coordinator');
if (!dep) fail('k8s', 'no Deployment meshtrain-coordinator');
else {
    if (dep.doc.spec.replicas !== 1) fail(dep.what, 'replicas must be 1');
    if (!dep.doc.spec.strategy || dep.doc.spec.strategy.type !== 'Recreate') fail(dep.what, 'strategy must be Recreate');
    const c = podChecks(dep, 'coordinator');
    if (c) {
        for (const p of ['readinessProbe', 'livenessProbe'])
            if (!c[p] || !c[p].httpGet || c[p].httpGet.path !== '/healthz') fail(dep.what, `${p} not on /healthz`);
        const pvc = (dep.doc.spec.template.spec.volumes || []).find((v) => v.persistentVolumeClaim);
        const m = pvc && c.volumeMounts.find((x) => x.name === pvc.name);
        if (!pvc || !find('PersistentVolumeClaim', pvc.persistentVolumeClaim.claimName) || !m ||
            c.args[c.args.indexOf('--state-dir') + 1] !== m.mountPath)
            fail(dep.what, '--state-dir is not on the PersistentVolumeClaim');
        datasetChecks(dep, c);
        const an = dep.doc.spec.template.metadata.annotations || {};
        if (an['prometheus.io/scrape'] !== 'true' || an['prometheus.io/port'] !== '7480' ||
            an['prometheus.io/path'] !== '/metrics')
            fail(dep.what, 'no Prometheus scrape annotations for :7480/metrics');
    }
    ok(`${dep.what} (meshtrain checks)`);
}
const svc = find('Service', 'meshtrain-coordinator');
const ports = svc ? svc.doc.spec.ports.map((p) => p.port).sort() : [];
if (JSON.stringify(ports) !== '[7400,7480]') fail('k8s Service meshtrain-coordinator', `ports ${ports}`);
const sts = find('StatefulSet', 'meshtrain-worker');
if (!sts) fail('k8s', 'no StatefulSet meshtrain-worker');
else {
    const c = podChecks(sts, 'worker');
    if (c) {
        const a = c.args;
        if (a[a.indexOf('--name') + 1] !== '$(POD_NAME)') fail(sts.what, '--name is not the pod name');
        if (a[a.indexOf('--coordinator') + 1] !== 'tcp://meshtrain-coordinator:7400')
            fail(sts.what, '--coordinator does not name the Service');
        if (!find('Service', sts.doc.spec.serviceName)) fail(sts.what, 'no headless Service');
        if (!c.readinessProbe) fail(sts.what, 'no readiness probe');
        if (!a.some((x, i) => x === '--data-root' && a[i + 1] === '/data')) fail(sts.what, 'no --data-root /data');
        datasetChecks(sts, c);
        // the worker's own Prometheus endpoint (--metrics-listen) and the annotations that find it
        const an = sts.doc.spec.template.metadata.annotations || {};
        const ml = a[a.indexOf('--metrics-listen') + 1] || '';
        const port = (c.ports || []).find((p) => p.name === 'metrics');
        if (a.indexOf('--metrics-listen') < 0 || !port || ml !== '0.0.0.0:' + port.containerPort ||
            an['prometheus.io/scrape'] !== 'true' || an['prometheus.io/port'] !== String(port.containerPort) ||
            an['prometheus.io/path'] !== '/metrics')
            fail(sts.what, 'no --metrics-listen with a metrics port and Prometheus scrape annotations for it');
    }
    ok(`${sts.what} (meshtrain checks)`);
}
process.exit(failures ? 1 : 0);
