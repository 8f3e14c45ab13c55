// A long conversation in real headless Chromium: it opens at its latest messages without
// rendering the rest, and older ones load as the reader scrolls up, keeping what the
// reader looks at in place.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openChat, replyFinished, send, withUpstream } from './harness.mjs';

const articles = (page) => page.locator('.transcript > article.message').count();
const firstText = (page) => page.locator('.transcript > article.message .bubble').first().innerText();

describe('long conversations', () => {
  const suite = withUpstream();

  test('a 500-message conversation opens at its latest page and loads older pages on scroll', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    const messages = [];
    for (let i = 0; i < 250; i++) {
      const n = String(i).padStart(3, '0');
      messages.push({ role: 'user', content: `question ${n}` }, { role: 'assistant', content: `answer **${n}**` });
    }
    const imported = await context.request.post(`${suite.parlor.url}/api/chat/general/sessions/import`, { data: messages });
    assert.equal(imported.status(), 201);
    const { session_id: session } = await imported.json();
    await page.goto(`${suite.parlor.url}/chat?agent=general&session=${session}`);
    await page.waitForSelector('body[data-hydrated]');

    // The latest 40 messages, scrolled to the end; the rest is announced, not rendered.
    assert.equal(await articles(page), 40);
    assert.equal(await firstText(page), 'question 230');
    assert.equal(await page.locator('button.older').innerText(), 'Show earlier messages (460 more)');
    const atEnd = await page.$eval('.transcript', (t) => t.scrollHeight - t.scrollTop - t.clientHeight < 5);
    assert.ok(atEnd, 'the page opens at the latest message');

    // Scrolling to the top brings the 40 before, and the message that was first stays
    // where the reader saw it.
    const question230 = page.locator('.transcript > article.message', { hasText: 'question 230' });
    await page.$eval('.transcript', (t) => { t.scrollTop = 0; });
    await page.waitForFunction(() => document.querySelectorAll('.transcript > article.message').length === 80);
    assert.equal(await firstText(page), 'question 210');
    const top = await page.$eval('.transcript', (t) => t.getBoundingClientRect().top);
    const box = await question230.boundingBox();
    assert.ok(box.y >= top - 5 && box.y < top + 200, `the first message stays in view (${box.y} vs ${top})`);

    // The button loads the next page too; all 500 are there in the end, the button goes.
    await page.locator('button.older').click();
    await page.waitForFunction(() => document.querySelectorAll('.transcript > article.message').length === 120);
    while (await page.locator('button.older').count() > 0) {
      const before = await articles(page);
      await page.$eval('.transcript', (t) => { t.scrollTop = 0; });
      await page.waitForFunction((n) => document.querySelectorAll('.transcript > article.message').length > n
        || !document.querySelector('button.older'), before);
    }
    assert.equal(await articles(page), 500);
    assert.equal(await firstText(page), 'question 000');
    // Replies of older pages are rendered Markdown, as on the first page.
    assert.equal(await page.locator('.transcript > article.message.assistant').first().locator('strong').innerText(), '000');

    // A message from an older page can be pinned, and the conversation goes on.
    const oldQuestion = page.locator('.transcript > article.message.user', { hasText: 'question 005' });
    await oldQuestion.locator('button.pin').click();
    await oldQuestion.locator('.pinned-tag').waitFor();
    await send(page, 'one more');
    await replyFinished(page);
    assert.equal(await articles(page), 502);
    const sent = (await suite.fake.requests()).at(-1).messages.map((m) => m.content);
    assert.ok(sent.includes('question 005'), 'the pinned old question is sent');
    assert.deepEqual(errors, []);
    await page.screenshot({ path: '/tmp/parlor-paging.png' });
    await context.close();
  });
});
