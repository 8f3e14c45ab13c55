// Whole conversations in real headless Chromium: edit (in place for the last question, in a
// fork for an earlier one), fork from here, rename, delete, search, export and import.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openChat, replyFinished, send, transcript, withUpstream } from './harness.mjs';

/** The user messages of the upstream's last request. */
async function sentUserTexts(fake) {
  const requests = await fake.requests();
  const last = requests[requests.length - 1];
  return last.messages.filter((m) => m.role === 'user').map((m) => m.content);
}

const userMessage = (page, text) =>
  page.locator('.transcript > article.message.user', { hasText: text });
const userTexts = async (page) =>
  (await transcript(page)).filter(([role]) => role === 'user').map(([, text]) => text);
const sessionOf = (page) => new URL(page.url()).searchParams.get('session');

/** A user message by its text, still found once its editor replaces the text. */
async function userMessageAt(page, text) {
  const index = (await userTexts(page)).indexOf(text);
  assert.ok(index >= 0, `no user message ${text}`);
  return page.locator('.transcript > article.message.user').nth(index);
}

async function editMessage(page, text, edited) {
  const message = await userMessageAt(page, text);
  await message.hover();
  await message.locator('button.edit').click();
  await message.locator('.edit-form textarea').fill(edited);
  await message.locator('button.send-edit').click();
}

describe('whole conversations', () => {
  const suite = withUpstream();

  test('edit, fork, rename, search, export, import and delete', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    for (const text of ['alpha one', 'beta two', 'gamma three']) {
      await send(page, text);
      await replyFinished(page);
    }
    const original = sessionOf(page);

    // Editing the last question replaces it (and its reply) in this conversation.
    await editMessage(page, 'gamma three', 'gamma edited');
    await replyFinished(page);
    assert.equal(sessionOf(page), original);
    assert.deepEqual(await userTexts(page), ['alpha one', 'beta two', 'gamma edited']);
    assert.equal((await transcript(page)).length, 6);
    assert.deepEqual(await sentUserTexts(suite.fake), ['alpha one', 'beta two', 'gamma edited']);

    // Editing an earlier one makes a new version of it in this conversation: the model
    // gets the new path, and ‹ brings the first version back whole.
    await editMessage(page, 'alpha one', 'alpha edited');
    await page.waitForFunction(() => document.querySelectorAll('.transcript > article.message').length === 2);
    await replyFinished(page);
    assert.equal(sessionOf(page), original);
    assert.deepEqual(await userTexts(page), ['alpha edited']);
    assert.deepEqual(await sentUserTexts(suite.fake), ['alpha edited']);
    const edited = userMessage(page, 'alpha edited');
    assert.equal(await edited.locator('.version-count').innerText(), '2/2');
    await Promise.all([page.waitForEvent('load'), edited.locator('button.version-prev').click()]);
    await page.waitForSelector('body[data-hydrated]');
    assert.deepEqual(await userTexts(page), ['alpha one', 'beta two', 'gamma edited']);
    const kept = await page.request.get(`${suite.parlor.url}/api/chat/general/sessions/${original}/export`);
    const export_ = await kept.json();
    assert.deepEqual(export_.messages.filter((m) => m.role === 'user').map((m) => m.text),
      ['alpha one', 'beta two', 'gamma edited']);
    assert.deepEqual(export_.branches.map((b) => b.messages[0].text).sort(), ['alpha edited', 'gamma three']);

    // Fork from here, on the original's second reply.
    await page.goto(`${suite.parlor.url}/chat?agent=general&session=${original}`);
    await page.waitForSelector('body[data-hydrated]');
    const reply = page.locator('.transcript > article.message.assistant').nth(1);
    await reply.hover();
    await reply.locator('button.fork').click();
    await page.waitForFunction((s) => new URL(location.href).searchParams.get('session') !== s, original);
    const fork = sessionOf(page);
    assert.equal((await transcript(page)).length, 4);
    await send(page, 'delta in the fork');
    await replyFinished(page);
    assert.deepEqual(await sentUserTexts(suite.fake), ['alpha one', 'beta two', 'delta in the fork']);
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    assert.deepEqual(await userTexts(page), ['alpha one', 'beta two', 'delta in the fork']);

    // Rename from the sidebar (the browser's own prompt).
    page.once('dialog', (dialog) => dialog.accept('Forked notes'));
    const forkItem = page.locator('.conversations li', { has: page.locator(`a[href*="${fork}"]`) });
    await forkItem.hover();
    await forkItem.locator('button.rename').click();
    await page.locator('.conversations a', { hasText: /^Forked notes$/ }).waitFor();
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    await page.locator('.conversations a', { hasText: /^Forked notes$/ }).waitFor();

    // Search: the server answers with the matching line; clearing the box brings the list back.
    await page.fill('.sidebar input.search', 'BETA');
    const results = page.locator('.search-results li');
    await results.first().waitFor();
    const lines = await page.locator('.search-results .hit-line').allInnerTexts();
    assert.ok(lines.length >= 2 && lines.every((l) => l === 'beta two'), JSON.stringify(lines));
    await page.fill('.sidebar input.search', 'no such words');
    await page.locator('.search-empty').waitFor();
    await page.fill('.sidebar input.search', '');
    await page.locator('.conversations').waitFor();

    // Export: Markdown and JSON downloads of the conversation shown.
    await page.locator('.conversation-menu summary').click();
    const [markdown] = await Promise.all([
      page.waitForEvent('download'),
      page.locator('.menu-items a', { hasText: 'Export as Markdown' }).click(),
    ]);
    assert.match(markdown.suggestedFilename(), /^parlor-general-.*\.md$/);
    const text = await (await import('node:fs/promises')).readFile(await markdown.path(), 'utf8');
    assert.match(text, /^# Forked notes\n/);
    assert.match(text, /## User · .* UTC\n\ndelta in the fork\n/);

    // Import: an OpenAI-style array becomes a new conversation of this browser, opened.
    const openai = [{ role: 'user', content: 'imported question' }, { role: 'assistant', content: 'imported answer' }];
    await page.locator('.menu-items input[name=import]').setInputFiles({
      name: 'chat.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(openai)),
    });
    await page.waitForURL((url) => url.searchParams.get('session') !== fork);
    await page.waitForSelector('body[data-hydrated]');
    assert.deepEqual(await transcript(page), [['user', 'imported question'], ['assistant', 'imported answer']]);
    // A malformed file is refused with the reason, and nothing is imported.
    const before = await page.locator('.conversations li').count();
    await page.locator('.conversation-menu summary').click();
    await page.locator('.menu-items input[name=import]').setInputFiles({
      name: 'bad.json', mimeType: 'application/json', buffer: Buffer.from('[{"role": "function", "content": "x"}]'),
    });
    assert.match(await page.locator('.menu-error').innerText(), /message 1: role "function" cannot be imported/);
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    assert.equal(await page.locator('.conversations li').count(), before);

    // Delete (after confirming): gone from the sidebar and from the server.
    page.once('dialog', (dialog) => dialog.accept());
    const forkItemNow = page.locator('.conversations li', { has: page.locator(`a[href*="${fork}"]`) });
    await forkItemNow.hover();
    await forkItemNow.locator('button.delete').click();
    await forkItemNow.waitFor({ state: 'detached' });
    const gone = await page.request.get(`${suite.parlor.url}/api/chat/general/sessions/${fork}/export`);
    assert.equal(gone.status(), 404);
    // Dismissing the confirmation keeps it.
    page.once('dialog', (dialog) => dialog.dismiss());
    const originalItem = page.locator('.conversations li', { has: page.locator(`a[href*="${original}"]`) });
    await originalItem.hover();
    await originalItem.locator('button.delete').click();
    await page.waitForTimeout(300);
    assert.equal(await originalItem.count(), 1);
    await page.screenshot({ path: '/tmp/parlor-conversations.png', fullPage: true });
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('the menu, search and editor fit a 375 px screen', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`, { width: 375, height: 740 });
    await send(page, 'small screen question');
    await replyFinished(page);
    const message = await userMessageAt(page, 'small screen question');
    await message.hover();
    await message.locator('button.edit').click();
    await message.locator('.edit-form textarea').waitFor();
    await page.locator('.conversation-menu summary').click();
    await page.locator('.menu-items a', { hasText: 'Export as JSON' }).waitFor();
    const overflow = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `page scrolls sideways by ${overflow}px`);
    const menu = await page.locator('.menu-items').boundingBox();
    assert.ok(menu.x >= 0 && menu.x + menu.width <= 375, JSON.stringify(menu));
    await page.screenshot({ path: '/tmp/parlor-conversations-375.png' });
    await page.locator('button.menu').click();
    await page.fill('.sidebar input.search', 'small');
    await page.locator('.search-results .hit-line', { hasText: 'small screen question' }).waitFor();
    await page.screenshot({ path: '/tmp/parlor-search-375.png' });
    await context.close();
  });
});
