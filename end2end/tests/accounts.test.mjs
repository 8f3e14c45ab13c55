// Accounts in Chromium: local logins made with the CLI, two users who never see each other's
// conversations, logout, a token made in the page and used as curl would, a browser's earlier
// conversations moving to its account, and OpenID logins against a real provider
// (npm oidc-provider), with a forged state, a replayed code, a changed nonce, a domain not
// allowed, an unverified address, an admin's name chosen at the provider, and a provider that is down.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  freePort, launchBrowser, parlorCommand, replyFinished, send, startOidcProvider, startParlor,
} from './harness.mjs';

const PASSWORD = 'a long passphrase';

async function addUser(parlor, name, admin = false) {
  const args = ['user', 'add', name, ...(admin ? ['--admin'] : [])];
  const out = await parlorCommand(args, { PARLOR_DATA_DIR: parlor.data }, `${PASSWORD}\n`);
  assert.match(out, new RegExp(`added ${name}`));
}

/** Logs in through the login page; resolves on the hydrated chat page. */
async function logIn(page, base, name, { target = '/chat?agent=general' } = {}) {
  await page.goto(`${base}${target}`);
  await page.waitForURL(/\/login\?next=/);
  await page.fill('input[name=username]', name);
  await page.fill('input[name=password]', PASSWORD);
  await page.click('form.account-form button[type=submit]');
  await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
}

const sessionOf = (page) => new URL(page.url()).searchParams.get('session');

describe('local accounts', () => {
  let parlor;
  let browser;
  before(async () => {
    parlor = await startParlor({ PARLOR_AUTH: 'local', PARLOR_MIRROR_DELAY_MS: '1' });
    browser = await launchBrowser();
    await addUser(parlor, 'ada', true);
    await addUser(parlor, 'bob');
  });
  after(async () => {
    await browser?.close();
    await parlor?.stop();
  });

  test('two users never see each other, log out, and a token from the page works with curl', async () => {
    const adaContext = await browser.newContext();
    const ada = await adaContext.newPage();
    await logIn(ada, parlor.url, 'ada');
    await send(ada, 'the secret of ada');
    await replyFinished(ada);
    const adaSession = sessionOf(ada);
    assert.ok(adaSession);
    await ada.locator('.conversations a', { hasText: 'the secret of ada' }).waitFor();

    const bobContext = await browser.newContext();
    const bob = await bobContext.newPage();
    await logIn(bob, parlor.url, 'bob');
    assert.equal(await bob.locator('.conversations a', { hasText: 'the secret of ada' }).count(), 0);
    const theirs = await bob.goto(`${parlor.url}/chat?agent=general&session=${adaSession}`);
    assert.equal(theirs.status(), 404);
    const search = await bob.request.get(`${parlor.url}/api/conversations/search?q=secret`);
    assert.deepEqual((await search.json()).results, []);

    // The menu names the user and leads to the tokens page.
    await ada.click('.conversation-menu summary');
    await ada.locator('.menu-user', { hasText: 'ada' }).waitFor();
    await ada.click('.menu-account a[href="/account/tokens"]');
    await ada.fill('input[name=label]', 'curl test');
    await ada.click('form[action="/account/tokens"] button');
    const token = (await ada.locator('code.token-value').innerText()).trim();
    assert.match(token, /^parlor_pat_[0-9a-f]{64}$/);
    await ada.locator('.account-tokens td', { hasText: 'curl test' }).waitFor();
    // As curl: no cookie, the token alone.
    const fromCurl = await fetch(`${parlor.url}/api/chat/general/sessions/${adaSession}/export`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(fromCurl.status, 200);
    assert.match(await fromCurl.text(), /the secret of ada/);
    const withoutToken = await fetch(`${parlor.url}/api/chat/general/sessions/${adaSession}/export`);
    assert.equal(withoutToken.status, 401);
    // Revoked in the page, it opens nothing.
    await ada.click('.account-tokens button');
    await ada.waitForSelector('.account-tokens', { state: 'detached' });
    const revoked = await fetch(`${parlor.url}/api/chat/general/sessions/${adaSession}/export`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(revoked.status, 401);

    // Log out: back at the login page, and the chat needs a login again.
    await ada.goto(`${parlor.url}/chat?agent=general`);
    await ada.waitForSelector('body[data-hydrated]');
    await ada.click('.conversation-menu summary');
    await ada.click('.menu-account button.logout');
    await ada.waitForURL(/\/login$/);
    await ada.goto(`${parlor.url}/chat?agent=general`);
    await ada.waitForURL(/\/login\?next=/);
    await adaContext.close();
    await bobContext.close();
  });

  test('a wrong password says so on the page, which fits 375 px', async () => {
    const context = await browser.newContext({ viewport: { width: 375, height: 740 } });
    const page = await context.newPage();
    await page.goto(`${parlor.url}/login`);
    await page.fill('input[name=username]', 'ada');
    await page.fill('input[name=password]', 'not the right one');
    await page.click('form.account-form button[type=submit]');
    await page.locator('.account-error', { hasText: 'wrong user name or password' }).waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
    assert.equal(overflow, false);
    await page.screenshot({ path: join(tmpdir(), 'parlor-login-375.png') });
    await context.close();
  });
});

describe('a browser that had conversations before accounts', () => {
  test('finds them in its account after its first login', async () => {
    const data = mkdtempSync(join(tmpdir(), 'parlor-e2e-move-'));
    const browser = await launchBrowser();
    const context = await browser.newContext();
    const page = await context.newPage();
    const port = await freePort();
    try {
      const open = await startParlor({ PARLOR_MIRROR_DELAY_MS: '1' }, { port, data });
      await page.goto(`${open.url}/chat?agent=general`);
      await page.waitForSelector('body[data-hydrated]');
      await send(page, 'written before accounts');
      await replyFinished(page);
      const earlier = sessionOf(page);
      await open.stop();

      const parlor = await startParlor({ PARLOR_AUTH: 'local' }, { port, data });
      await addUser(parlor, 'carol');
      await logIn(page, parlor.url, 'carol');
      await page.locator('.conversations a', { hasText: 'written before accounts' }).waitFor();
      const own = await page.request.get(`${parlor.url}/api/chat/general/sessions/${earlier}/export`);
      assert.equal(own.status(), 200);
      await parlor.stop();
    } finally {
      await browser.close();
      rmSync(data, { recursive: true, force: true });
    }
  });
});

describe('OpenID Connect', () => {
  let provider;
  let parlor;
  let browser;
  before(async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    provider = await startOidcProvider(`${base}/auth/callback`);
    parlor = await startParlor({
      PARLOR_AUTH: 'oidc',
      PARLOR_PUBLIC_URL: base,
      PARLOR_OIDC_ISSUER: provider.issuer,
      PARLOR_OIDC_CLIENT_ID: 'parlor',
      PARLOR_OIDC_CLIENT_SECRET: 'parlor-test-secret',
      PARLOR_OIDC_SCOPES: 'openid email profile groups',
      PARLOR_OIDC_ALLOWED_DOMAINS: 'example.com',
      PARLOR_OIDC_ADMIN_GROUP: 'parlor-admins',
      PARLOR_OIDC_ADMIN_EMAILS: 'boss@example.com',
      PARLOR_ADMINS: 'root',
    }, { port });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await parlor?.stop();
    provider?.stop();
  });

  /** From Parlor's login page through the provider's pages, as `login`. */
  async function throughProvider(page, login) {
    await page.goto(`${parlor.url}/chat?agent=general`);
    await page.waitForURL(/\/login\?next=/);
    await page.click('a.account-button');
    await page.waitForURL(new RegExp(`^${provider.issuer}/interaction/`));
    await page.fill('input[name=login]', login);
    await page.fill('input[name=password]', 'anything');
    await page.click('button[type=submit]');
    await page.waitForSelector('button[type=submit]:has-text("Continue")');
    await page.click('button[type=submit]');
  }

  test('logs in through the provider; its admin group makes admins', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await throughProvider(page, 'Ada@example.com');
    await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    assert.match(page.url(), /\/chat\?agent=general/);
    const me = await (await page.request.get(`${parlor.url}/api/account`)).json();
    // The account's name is made from the provider's; the page shows the provider's own.
    assert.equal(me.name, 'ada');
    assert.equal(me.display, 'Ada');
    assert.equal(me.admin, false);
    assert.equal((await page.textContent('.menu-user'))?.trim(), 'Logged in as Ada');
    await context.close();

    const adminContext = await browser.newContext();
    const admin = await adminContext.newPage();
    await throughProvider(admin, 'admin@example.com');
    await admin.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    const boss = await (await admin.request.get(`${parlor.url}/api/account`)).json();
    assert.equal(boss.admin, true);
    await adminContext.close();
  });

  test('a forged state, a replayed code and a changed nonce are refused', async () => {
    // A callback whose state is not the one this browser started (its cookie holds another).
    let context = await browser.newContext();
    let page = await context.newPage();
    await page.goto(`${parlor.url}/login`);
    await page.click('a.account-button');
    await page.waitForURL(new RegExp(`^${provider.issuer}/interaction/`));
    await context.addCookies([{ name: 'parlor_oidc', value: 'another-state', url: `${parlor.url}/auth/` }]);
    await page.fill('input[name=login]', 'ada@example.com');
    await page.fill('input[name=password]', 'anything');
    await page.click('button[type=submit]');
    await page.click('button[type=submit]:has-text("Continue")');
    await page.locator('.account-error', { hasText: 'does not match' }).waitFor();
    await context.close();

    // A code used once already: the same callback again, even with the state cookie put back.
    context = await browser.newContext();
    page = await context.newPage();
    let callback;
    page.on('request', (r) => { if (r.url().includes('/auth/callback?')) callback = r.url(); });
    const flowCookie = [];
    page.on('response', async (r) => {
      const set = (await r.headersArray()).filter((h) => h.name.toLowerCase() === 'set-cookie');
      for (const h of set) if (h.value.startsWith('parlor_oidc=') && !h.value.startsWith('parlor_oidc=;')) flowCookie.push(h.value);
    });
    await throughProvider(page, 'ada@example.com');
    await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    const state = new URL(callback).searchParams.get('state');
    await context.addCookies([{ name: 'parlor_oidc', value: state, url: `${parlor.url}/auth/` }]);
    await page.goto(callback);
    await page.locator('.account-error', { hasText: 'already used' }).waitFor();
    assert.ok(flowCookie.length > 0, 'the flow cookie was set');
    await context.close();

    // A nonce changed on its way to the provider: the ID token's does not match the login's.
    // (Parlor's redirect to the provider is rewritten; the flow cookie it sets passes on.)
    context = await browser.newContext();
    page = await context.newPage();
    await page.route('**/auth/oidc?**', async (route) => {
      const response = await route.fetch({ maxRedirects: 0 });
      const location = new URL(response.headers().location);
      location.searchParams.set('nonce', 'changed-nonce');
      await route.fulfill({ response, headers: { ...response.headers(), location: location.toString() } });
    });
    await throughProvider(page, 'ada@example.com');
    await page.locator('.account-error', { hasText: 'could not be verified' }).waitFor();
    const refused = await page.request.get(`${parlor.url}/api/account`);
    assert.equal(refused.status(), 401);
    await context.close();
  });

  test('an e-mail domain that is not allowed may not log in', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await throughProvider(page, 'eve@evil.test');
    await page.locator('.account-error', { hasText: 'evil.test may not log in' }).waitFor();
    assert.equal((await page.request.get(`${parlor.url}/api/account`)).status(), 401);
    await context.close();
  });

  test('an unverified address is refused, an admin\'s name makes no admin, a verified listed address does', async () => {
    let context = await browser.newContext();
    let page = await context.newPage();
    await throughProvider(page, 'unverified-eve@example.com');
    await page.locator('.account-error', { hasText: 'not verified' }).waitFor();
    assert.equal((await page.request.get(`${parlor.url}/api/account`)).status(), 401);
    await context.close();

    // `root` is in PARLOR_ADMINS, but a name chosen at the provider makes no admin.
    context = await browser.newContext();
    page = await context.newPage();
    await throughProvider(page, 'root@example.com');
    await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    const root = await (await page.request.get(`${parlor.url}/api/account`)).json();
    assert.equal(root.admin, false);
    await context.close();

    context = await browser.newContext();
    page = await context.newPage();
    await throughProvider(page, 'boss@example.com');
    await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    const boss = await (await page.request.get(`${parlor.url}/api/account`)).json();
    assert.equal(boss.admin, true, 'a verified address in PARLOR_OIDC_ADMIN_EMAILS');
    await context.close();
  });

  test('a provider that is down at startup does not stop Parlor', async () => {
    const closed = await freePort();
    const port = await freePort();
    const lonely = await startParlor({
      PARLOR_AUTH: 'oidc',
      PARLOR_PUBLIC_URL: `http://127.0.0.1:${port}`,
      PARLOR_OIDC_ISSUER: `http://127.0.0.1:${closed}`,
      PARLOR_OIDC_CLIENT_ID: 'parlor',
      PARLOR_ADMIN_TOKEN: 'ops',
    }, { port });
    try {
      // Anyone learns ready or not; why is the operator's.
      const open = await (await fetch(`${lonely.url}/readyz`)).json();
      assert.deepEqual(open, { ready: true });
      const ready = await (await fetch(`${lonely.url}/readyz`, {
        headers: { 'x-parlor-admin-token': 'ops' },
      })).json();
      assert.match(ready.login_provider, /cannot be reached/);
      const login = await fetch(`${lonely.url}/login`);
      assert.equal(login.status, 503);
      assert.match(await login.text(), /cannot be reached/);
    } finally {
      await lonely.stop();
    }
  });
});
