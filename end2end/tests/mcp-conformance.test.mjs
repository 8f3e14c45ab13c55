// The official MCP server conformance suite (npm `@modelcontextprotocol/conformance`) against
// `/mcp` on a running Parlor, for the scenarios that apply to any MCP server.
//
// The suite's CLI cannot send a bearer token, so it talks to a small local proxy that adds
// `Authorization: Bearer <PARLOR_MCP_TOKEN>` and forwards everything else byte for byte
// (the `Host` and `Origin` headers included, so the DNS-rebinding scenario reaches Parlor's
// own checks). Responses, server-sent event streams included, are streamed back unbuffered.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, request } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { freePort, startParlor } from './harness.mjs';

const TOKEN = 'conformance-token';
const SCENARIOS = ['server-initialize', 'ping', 'tools-list', 'server-sse-multiple-streams',
  'dns-rebinding-protection'];

function startProxy(target, port) {
  const upstream = new URL(target);
  const server = createServer((incoming, outgoing) => {
    const forwarded = request({
      host: upstream.hostname,
      port: upstream.port,
      method: incoming.method,
      path: incoming.url,
      headers: { ...incoming.headers, authorization: `Bearer ${TOKEN}` },
    }, (reply) => {
      outgoing.writeHead(reply.statusCode, reply.headers);
      outgoing.flushHeaders();
      reply.pipe(outgoing);
    });
    forwarded.on('error', (e) => {
      if (!outgoing.headersSent) outgoing.writeHead(502);
      outgoing.end(String(e));
    });
    outgoing.on('close', () => forwarded.destroy());
    incoming.pipe(forwarded);
  });
  return new Promise((ok) => server.listen(port, '127.0.0.1', () => ok(server)));
}

function conformance(url, scenario) {
  const bin = join(import.meta.dirname, '..', 'node_modules', '.bin', 'conformance');
  return new Promise((ok, fail) => {
    const child = spawn(bin, ['server', '--url', url, '--scenario', scenario],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => { output += d; });
    child.stderr.on('data', (d) => { output += d; });
    child.on('error', fail);
    child.on('close', (code) => ok({ code, output }));
  });
}

describe('MCP conformance of /mcp', () => {
  let parlor, proxy, url;
  before(async () => {
    parlor = await startParlor({ PARLOR_MCP_TOKEN: TOKEN });
    const port = await freePort();
    proxy = await startProxy(parlor.url, port);
    url = `http://127.0.0.1:${port}/mcp`;
  });
  after(async () => {
    proxy?.closeAllConnections();
    proxy?.close();
    await parlor?.stop();
  });

  test('without the token /mcp answers 401', async () => {
    const response = await fetch(`${parlor.url}/mcp`, { method: 'POST' });
    assert.equal(response.status, 401);
  });

  for (const scenario of SCENARIOS) {
    test(`scenario ${scenario} passes`, async () => {
      const { code, output } = await conformance(url, scenario);
      assert.equal(code, 0, `${scenario} failed:\n${output}\n--- parlor log ---\n${parlor.log().slice(-3000)}`);
      assert.doesNotMatch(output, /FAILURE/, output);
    });
  }
});
