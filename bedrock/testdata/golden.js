// Writes golden.json(.gz): envelopes framed exactly as the JavaScript bus of
// seed 000 frames them (JSON.stringify, String.prototype.slice in UTF-16
// code units). Run with node: node golden.js | gzip -9n > golden.json.gz
'use strict';
const MAX_MESSAGE = 2000;
function frames(env) {
  const encoded = JSON.stringify(env);
  const c = env.mid;
  const overhead = JSON.stringify({ c, s: 999999, t: 999999, p: '' }).length;
  const budget = Math.floor((MAX_MESSAGE - overhead) / 2);
  const t = Math.max(1, Math.ceil(encoded.length / budget));
  const out = [];
  for (let s = 0; s < t; s++) {
    out.push(JSON.stringify({ c, s, t, p: encoded.slice(s * budget, (s + 1) * budget) }));
  }
  return { encoded, overhead, budget, frames: out };
}
const emoji = '\u{1F600}';
const cases = [
  { name: 'plain', env: { v: 1, src: 'lights', iid: 'i1', type: 'whois', mid: 'i1/1' } },
  { name: 'all fields', env: { v: 1, src: 'lights', iid: 'i1', dst: 'door', type: 'req', mid: 'i1/2', data: { method: 'open', params: [1, 'two', null, true] } } },
  { name: 'escapes', env: { v: 1, src: 'a', iid: 'b', type: 'res', mid: 'b/3', data: { s: 'quote " backslash \\ slash / nl \n cr \r tab \t bs \b ff \f nul \u0000 us \u001f del \u007f' } } },
  { name: 'non-ascii', env: { v: 1, src: 'a', iid: 'b', type: 'res', mid: 'b/4', data: 'caf\u00e9 \u4e2d\u6587 <tag> & \u2028 \u2029 ' + emoji } },
  { name: 'lone surrogates', env: { v: 1, src: 'a', iid: 'b', type: 'res', mid: 'b/5', data: 'hi \ud800 lo \udc00 end' } },
];
// Long payloads whose slices fall on every kind of character, and whose
// surrogate pairs straddle a frame boundary.
for (const [name, unit] of [['ascii', 'x'], ['quotes', '"'], ['backslashes', '\\'], ['controls', '\u0001'], ['emoji', emoji], ['mixed', 'a"\\\u00e9' + emoji + '\n']]) {
  for (const n of [400, 971, 1937, 2900]) {
    cases.push({ name: `long ${name} ${n}`, env: { v: 1, src: 'big', iid: 'z9', type: 'state-delta', mid: 'z9/' + n, data: { ns: 'n', key: 'k', value: unit.repeat(n), ver: 7 } } });
  }
}
// Odd offsets so a pair lands on a boundary.
for (let pad = 0; pad < 4; pad++) {
  cases.push({ name: `straddle ${pad}`, env: { v: 1, src: 's', iid: 'q', type: 'res', mid: 'q/' + pad, data: 'p'.repeat(pad) + emoji.repeat(700) } });
}
const out = cases.map(({ name, env }) => ({ name, env, ...frames(env) }));
process.stdout.write(JSON.stringify(out, null, 1) + '\n');
