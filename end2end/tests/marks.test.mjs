// Pinned and excluded messages in real headless Chromium: the marks are set from the
// transcript, shown, kept across a reload, and decide what reaches the upstream.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openChat, replyFinished, send, withUpstream } from './harness.mjs';

/** The user messages of the upstream's last request. */
async function sentUserTexts(fake) {
  const requests = await fake.requests();
  const last = requests[requests.length - 1];
  return last.messages.filter((m) => m.role === 'user').map((m) => m.content);
}

const userMessage = (page, text) =>
  page.locator('.transcript > article.message.user', { hasText: text });

describe('pin and exclude', () => {
  const suite = withUpstream();

  test('a pinned message outlives the window, an excluded one is never sent, both survive a reload', async () => {
    // `concise` sends the last two turns.
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=concise`);
    for (const text of ['the project is called Atlas', 'two', 'three']) {
      await send(page, text);
      await replyFinished(page);
    }
    const first = userMessage(page, 'the project is called Atlas');
    await first.locator('button.pin').click();
    await first.locator('.pinned-tag').waitFor();
    assert.equal(await first.locator('button.pin').innerText(), 'Unpin');
    // From the keyboard: the button keeps the focus when its row is drawn again.
    const third = userMessage(page, 'three');
    await third.locator('button.exclude').focus();
    await page.keyboard.press('Enter');
    await page.waitForSelector('.transcript > article.message.user.excluded');
    await third.locator('button.exclude[aria-pressed="true"]').waitFor();
    assert.deepEqual(
      await page.evaluate(() => [document.activeElement.dataset.act, document.activeElement.innerText]),
      ['exclude', 'Send again'],
    );
    assert.match(await third.locator('.excluded-tag').innerText(), /not sent: excluded/);

    await send(page, 'four');
    await replyFinished(page);
    assert.deepEqual(await sentUserTexts(suite.fake), ['the project is called Atlas', 'four']);

    // The debug panel (same browser: the conversation is this browser's) lists the marks
    // step and what the marks did.
    const debug = await context.newPage();
    await debug.goto(`${page.url()}&debug=true`);
    await debug.waitForSelector('body[data-hydrated]');
    const marks = await debug.locator('[data-fact="marks"]').innerText();
    assert.match(marks, /1 pinned message sent/);
    assert.match(marks, /1 excluded message left out/);
    assert.match(await debug.locator('[data-step="marks"]').innerText(), /marks \+1 −2 → /);
    await debug.close();

    // The marks are stored: a reload shows them.
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    await userMessage(page, 'the project is called Atlas').locator('.pinned-tag').waitFor();
    await page.waitForSelector('.transcript > article.message.user.excluded');
    await page.screenshot({ path: '/tmp/parlor-marks.png', fullPage: true });

    // Unpinning and including again restore the window.
    await userMessage(page, 'the project is called Atlas').locator('button.pin').click();
    await page.waitForFunction(() => document.querySelectorAll('.pinned-tag').length === 0);
    await userMessage(page, 'three').locator('button.exclude').click();
    await page.waitForFunction(() => document.querySelectorAll('article.excluded').length === 0);
    await send(page, 'five');
    await replyFinished(page);
    assert.deepEqual(await sentUserTexts(suite.fake), ['four', 'five']);

    // A stale tab: the conversation was reset elsewhere; marking says why it cannot.
    const other = await context.newPage();
    await other.goto(page.url());
    await other.waitForSelector('body[data-hydrated]');
    await send(other, '!reset');
    await other.waitForSelector('.command-notice');
    await other.close();
    await userMessage(page, 'five').locator('button.pin').click();
    assert.match(await userMessage(page, 'five').locator('.mark-error').innerText(), /no message with id/);
    assert.equal(await userMessage(page, 'five').locator('.pinned-tag').count(), 0);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('marks work at 375 px too', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=concise`, { width: 375, height: 740 });
    await send(page, 'small screen');
    await replyFinished(page);
    const reply = page.locator('.transcript > article.message.assistant').last();
    await reply.locator('button.exclude').click();
    await page.waitForSelector('.transcript > article.message.assistant.excluded');
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
    assert.equal(overflow, false, 'no sideways scrolling');
    await page.screenshot({ path: '/tmp/parlor-marks-375.png', fullPage: true });
    await context.close();
  });
});
