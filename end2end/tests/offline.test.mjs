// Parlor with nothing configured: the built-in mirror model, the agent list, small screens.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { launchBrowser, lastReply, openChat, replyFinished, startParlor } from './harness.mjs';

describe('offline, with the mirror model', () => {
  let parlor, browser;
  before(async () => {
    parlor = await startParlor({ PARLOR_MIRROR_DELAY_MS: '5' });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await parlor?.stop();
  });

  test('the home page lists the agents and links to their chats', async () => {
    const { page, context } = await openChat(browser, `${parlor.url}/`, { hydrated: false });
    const names = await page.locator('.agent-name').allInnerTexts();
    assert.deepEqual(names, ['Concise Coder', 'General Assistant', 'Stateless Translator']);
    await page.click('text=Stateless Translator');
    await page.waitForURL(/\/chat\?agent=stateless$/);
    await page.waitForSelector('h1:has-text("Stateless Translator")');
    await page.waitForSelector('body[data-hydrated]');
    await context.close();
  });

  test('an empty chat offers the agent greeting and prompts; a prompt sends; the mirror says what it got', async () => {
    const { page, context } = await openChat(browser, `${parlor.url}/chat?agent=general`);
    assert.match(await page.locator('.mirror-notice').innerText(), /mirror/);
    assert.match(await page.locator('.intro-message').innerText(), /general assistant/);
    await page.click('button.suggestion:has-text("Write a Markdown table")');
    await replyFinished(page);
    const reply = await lastReply(page).innerText();
    assert.match(reply, /I received 2 messages/);
    assert.match(reply, /user: “Write a Markdown table of three planets”/);
    assert.equal(await page.locator('.intro').count(), 0, 'the greeting gives way to the conversation');
    await context.close();
  });

  test('the chat page works under its Content-Security-Policy, which blocks injected scripts', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    // Count every policy violation from the first byte of the page on.
    await page.addInitScript(() => {
      window.__violations = [];
      document.addEventListener('securitypolicyviolation', (e) =>
        window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
    });
    const response = await page.goto(`${parlor.url}/chat?agent=general`);
    const policy = response.headers()['content-security-policy'];
    assert.match(policy, /script-src 'self' 'nonce-[^']+' 'wasm-unsafe-eval'/);
    await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    await page.fill('textarea[name=message]', 'does everything still work?');
    await page.press('textarea[name=message]', 'Enter');
    await replyFinished(page);
    assert.match(await lastReply(page).innerText(), /I received 2 messages/);
    assert.deepEqual(await page.evaluate(() => window.__violations), [],
      'hydration, the WASM, the stylesheet and the chat stream are all allowed');
    // What an HTML injection would try: an inline script, and an inline event handler.
    await page.evaluate(() => {
      const script = document.createElement('script');
      script.textContent = 'window.__injected = true;';
      document.body.appendChild(script);
      const img = document.createElement('img');
      img.setAttribute('onerror', 'window.__injected = true;');
      img.src = 'data:,not-an-image';
      document.body.appendChild(img);
    });
    await page.waitForFunction(() => window.__violations.length >= 2);
    assert.equal(await page.evaluate(() => window.__injected), undefined);
    await context.close();
  });

  test('light and dark follow the system setting', async () => {
    const background = async (colorScheme) => {
      const { page, context } = await openChat(browser, `${parlor.url}/chat?agent=general`, { colorScheme });
      const color = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
      await context.close();
      return color.match(/\d+/g).slice(0, 3).map(Number).reduce((a, b) => a + b, 0);
    };
    const light = await background('light');
    const dark = await background('dark');
    assert.ok(light > 600, `light background is light (${light})`);
    assert.ok(dark < 150, `dark background is dark (${dark})`);
  });

  test('works at 375 px: no sideways scrolling, the sidebar opens from the menu', async () => {
    const { page, context } = await openChat(browser, `${parlor.url}/chat?agent=concise`, { width: 375, height: 740 });
    await page.fill('textarea[name=message]', 'a fairly long message that should wrap nicely on a phone screen without overflow');
    await page.press('textarea[name=message]', 'Enter');
    await replyFinished(page);
    const overflow = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `page scrolls sideways by ${overflow}px`);
    const sidebar = page.locator('nav.sidebar');
    assert.ok((await sidebar.boundingBox()).x < 0, 'sidebar starts hidden');
    await page.click('button.menu');
    await page.waitForFunction(() => document.querySelector('nav.sidebar').getBoundingClientRect().x >= 0);
    await context.close();
  });
});
