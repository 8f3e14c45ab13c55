// Versions in real headless Chromium: regenerate and edit keep every version, ‹ › moves
// between them (mouse and keyboard, at 375 px), the chosen path survives a reload and shows
// in another browser with the same session, reaches the model, and search opens a version
// that is not chosen.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, test } from 'node:test';
import { openChat, replyFinished, send, transcript, withUpstream } from './harness.mjs';

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** The serious and critical faults axe-core (WCAG 2.x A and AA) finds in the transcript. */
async function transcriptFaults(page) {
  await page.evaluate(axeSource);
  return page.evaluate(async () => {
    const result = await globalThis.axe.run(document.querySelector('.transcript'),
      { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } });
    return result.violations.filter((v) => ['serious', 'critical'].includes(v.impact))
      .flatMap((v) => v.nodes.map((n) => `${v.id}: ${n.target.join(' ')}`));
  });
}

const userMessage = (page, text) =>
  page.locator('.transcript > article.message.user', { hasText: text });
const versionsOf = (message) => message.locator('.versions .version-count');

/** Waits for the page to load again after a version was chosen. */
async function chosen(page, click) {
  await Promise.all([page.waitForEvent('load'), click()]);
  await page.waitForSelector('body[data-hydrated]');
}

/** The user texts of the upstream's last request. */
async function sentUserTexts(fake) {
  const last = (await fake.requests()).at(-1);
  return last.messages.filter((m) => m.role === 'user').map((m) => m.content);
}

describe('versions', () => {
  const suite = withUpstream();

  test('edit and regenerate keep every version, ‹ › moves between them and the path is remembered', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`, { width: 375, height: 740 });
    await send(page, 'plan a trip to Lisbon');
    await replyFinished(page);
    await send(page, 'and a day in Sintra');
    await replyFinished(page);

    // Regenerate: the reply gets a second version, shown as 2/2.
    await page.locator('.message.assistant').last().locator('button.regenerate').click();
    await replyFinished(page);
    const lastReply = page.locator('.transcript > article.message.assistant').last();
    assert.equal(await versionsOf(lastReply).innerText(), '2/2');

    // Edit the first question: it and both turns after it stay as version 1.
    const first = userMessage(page, 'plan a trip to Lisbon');
    await first.locator('button.edit').click();
    await page.locator('.edit-form textarea').fill('plan a trip to Porto');
    await page.locator('.edit-form button.send-edit').click();
    await replyFinished(page);
    const edited = userMessage(page, 'plan a trip to Porto');
    assert.equal(await versionsOf(edited).innerText(), '2/2');
    assert.equal((await transcript(page)).length, 2);
    assert.deepEqual(await sentUserTexts(suite.fake), ['plan a trip to Porto']);

    // ‹ by keyboard: the first version comes back whole, with its regenerated reply chosen.
    await edited.locator('button.version-prev').focus();
    await chosen(page, () => page.keyboard.press('Enter'));
    const back = await transcript(page);
    assert.deepEqual(back.map(([role]) => role), ['user', 'assistant', 'user', 'assistant']);
    assert.equal(back[0][1], 'plan a trip to Lisbon');
    assert.equal(await versionsOf(userMessage(page, 'plan a trip to Lisbon')).innerText(), '1/2');
    const reply = page.locator('.transcript > article.message.assistant').last();
    assert.equal(await versionsOf(reply).innerText(), '2/2');
    // The buttons fit the phone's width.
    const box = await page.locator('.versions').first().boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 375, JSON.stringify(box));

    // No accessibility fault at 375 px in ‹ n/m ›, nor in the open edit form.
    assert.deepEqual(await transcriptFaults(page), [], '375 px');
    await userMessage(page, 'plan a trip to Lisbon').locator('button.edit').click();
    await page.locator('.edit-form textarea').waitFor();
    assert.deepEqual(await transcriptFaults(page), [], 'the edit form at 375 px');
    await page.locator('.edit-form button.cancel-edit').click();

    // ‹ on the reply by mouse: its first version.
    await chosen(page, () => reply.locator('button.version-prev').click());
    assert.equal(await versionsOf(page.locator('.transcript > article.message.assistant').last()).innerText(), '1/2');
    const path = await transcript(page);

    // What the model receives is the chosen path.
    await send(page, 'what should I pack?');
    await replyFinished(page);
    assert.deepEqual(await sentUserTexts(suite.fake),
      ['plan a trip to Lisbon', 'and a day in Sintra', 'what should I pack?']);

    // The debug panel says which path the model receives and where the versions are.
    const debug = await context.newPage();
    await debug.goto(`${page.url()}&debug=true`);
    await debug.waitForSelector('body[data-hydrated]');
    assert.match(await debug.locator('[data-fact="versions"]').innerText(),
      /the model receives the chosen path \(6 messages\); 2 other version\(s\) \(3 messages\) branch off at #1 \(1\/2\), #4 \(1\/2\)/);
    await debug.close();

    // A reload and another browser with the same session show the same path.
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    const reloaded = await transcript(page);
    assert.deepEqual(reloaded.slice(0, 4), path);
    const other = await suite.browser.newContext({ storageState: await context.storageState() });
    const otherPage = await other.newPage();
    await otherPage.goto(page.url());
    await otherPage.waitForSelector('body[data-hydrated]');
    assert.deepEqual(await transcript(otherPage), reloaded);

    // › by mouse in the other browser: the edited version.
    await chosen(otherPage, () => userMessage(otherPage, 'plan a trip to Lisbon').locator('button.version-next').click());
    assert.equal((await transcript(otherPage))[0][1], 'plan a trip to Porto');

    // Search finds text on the version that is not chosen, says so, and opens it (in the
    // wide layout, where the sidebar shows).
    await page.setViewportSize({ width: 1200, height: 800 });
    await page.fill('input.search', 'Sintra');
    const hit = page.locator('.search-results a', { hasText: 'Sintra' });
    await hit.waitFor();
    assert.match(await hit.innerText(), /on another version/);
    await Promise.all([page.waitForURL(/session=/), page.waitForEvent('load'), hit.click()]);
    await page.waitForSelector('body[data-hydrated]');
    assert.equal((await transcript(page))[0][1], 'plan a trip to Lisbon');

    // No accessibility fault in the versions controls.
    assert.deepEqual(await transcriptFaults(page), []);
    assert.deepEqual(errors, []);
    await other.close();
    await context.close();
  });
});
