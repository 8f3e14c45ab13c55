// Starts real processes for the browser tests: the fake OpenAI-compatible upstream, Parlor
// itself (`target/debug/parlor`, as `cargo test` builds it, serving the site cargo-leptos
// built) and headless Chromium.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before } from 'node:test';
import { chromium } from 'playwright-core';

export const root = resolve(import.meta.dirname, '..', '..');
const bin = (name) => join(root, 'target', 'debug', name);

export function freePort() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

async function waitFor(url, child, log) {
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null) throw new Error(`process exited early:\n${log()}`);
    try {
      const res = await fetch(url);
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url} never answered:\n${log()}`);
}

function run(cmd, args, env) {
  const child = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => { output += d; });
  child.stderr.on('data', (d) => { output += d; });
  return { child, log: () => output };
}

/** The fake upstream: resolves once it prints its address. */
export async function startFakeLlm() {
  const port = await freePort();
  const proc = run(bin('fake-llm'), [String(port)], {});
  const base = `http://127.0.0.1:${port}`;
  await waitFor(`${base}/v1/models`, proc.child, proc.log);
  return {
    baseUrl: `${base}/v1`,
    requests: async () => (await fetch(`${base}/_requests`)).json(),
    stop: () => proc.child.kill(),
  };
}

/**
 * A Parlor server with its own data folder. `env` adds or overrides variables; `port` and
 * `data` (a folder kept when it stops) may be chosen.
 */
export async function startParlor(env = {}, { port: chosenPort, data: keptData } = {}) {
  const port = chosenPort ?? await freePort();
  const data = keptData ?? mkdtempSync(join(tmpdir(), 'parlor-e2e-'));
  const proc = run(bin('parlor'), [], {
    LEPTOS_SITE_ADDR: `127.0.0.1:${port}`,
    LEPTOS_SITE_ROOT: join(root, 'target', 'site'),
    LEPTOS_OUTPUT_NAME: 'parlor',
    LEPTOS_ENV: 'DEV',
    PARLOR_AGENTS_DIR: join(root, 'agents'),
    PARLOR_DATA_DIR: data,
    OPENAI_BASE_URL: '',
    OPENAI_API_KEY: '',
    PARLOR_MODEL: '',
    ...env,
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(`${url}/healthz`, proc.child, proc.log);
  return {
    url,
    data,
    log: proc.log,
    /** Ends the process (resolves once it has exited). */
    stop: () => {
      const exited = proc.child.exitCode !== null
        ? Promise.resolve()
        : new Promise((ok) => proc.child.once('exit', ok));
      proc.child.kill();
      // Removed once the process is gone: a server still finishing a write would put files
      // back into a folder being removed (ENOTEMPTY).
      return exited.then(() => {
        if (!keptData) rmSync(data, { recursive: true, force: true });
      });
    },
  };
}

/** Runs `parlor ARGS` (an operator command) with `env` and `input` on stdin: its output. */
export function parlorCommand(args, env, input = '') {
  return new Promise((ok, fail) => {
    const child = spawn(bin('parlor'), args, { cwd: root, env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('exit', (code) => (code === 0 ? ok(out) : fail(new Error(`parlor ${args.join(' ')}: ${err}`))));
    child.stdin.end(input);
  });
}

/** A real OpenID provider (npm oidc-provider) whose client `parlor` returns to `redirect`. */
export async function startOidcProvider(redirect) {
  const port = await freePort();
  const proc = run('node', [join(root, 'end2end', 'oidc-provider.mjs'), String(port), redirect], {});
  const issuer = `http://127.0.0.1:${port}`;
  await waitFor(`${issuer}/.well-known/openid-configuration`, proc.child, proc.log);
  return { issuer, log: proc.log, stop: () => proc.child.kill() };
}

export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}

/** Opens a page and, for chat pages, waits until the WASM has hydrated the chat. */
export async function openChat(browser, url, { width = 1200, height = 800, colorScheme = 'light', hydrated = true } = {}) {
  const context = await browser.newContext({ viewport: { width, height }, colorScheme });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(url);
  if (hydrated) await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
  return { page, context, errors };
}

/** Types a message in the composer and sends it with Enter. */
export async function send(page, text) {
  await page.fill('textarea[name=message]', text);
  await page.press('textarea[name=message]', 'Enter');
}

export const lastReply = (page) => page.locator('.message.assistant').last();

/** Waits until the last reply has finished streaming (its actions appear). */
export async function replyFinished(page) {
  await page.waitForFunction(() => {
    const messages = document.querySelectorAll('.transcript > article.message');
    const last = messages[messages.length - 1];
    // The debug panel, when open, is fetched again after the reply: wait for it too.
    return last && last.dataset.role === 'assistant' && !last.classList.contains('streaming')
      && last.querySelector('.actions .copy') !== null
      && document.querySelector('.debug-panel[aria-busy="true"]') === null;
  }, null, { timeout: 30000 });
}

/** The transcript as [role, text] pairs. */
export async function transcript(page) {
  return page.$$eval('.transcript > article.message', (nodes) =>
    nodes.map((n) => [n.dataset.role, n.querySelector('.bubble').innerText.trim()]));
}

/**
 * Inside a describe(): starts the fake upstream, a Parlor in front of it and Chromium before
 * the suite, and stops them after it. The returned object's fields are set once it started.
 */
export function withUpstream(env = {}) {
  const stack = {};
  before(async () => {
    stack.fake = await startFakeLlm();
    stack.parlor = await startParlor({ OPENAI_BASE_URL: stack.fake.baseUrl, ...env });
    stack.browser = await launchBrowser();
  });
  after(async () => {
    await stack.browser?.close();
    stack.parlor?.stop();
    stack.fake?.stop();
  });
  return stack;
}
