// The chat page in real headless Chromium against a real OpenAI-compatible upstream.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { lastReply, openChat, replyFinished, send, transcript, withUpstream } from './harness.mjs';

describe('chat with an upstream model', () => {
  const suite = withUpstream();

  test('two messages stream in, and a reload shows the same transcript', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    assert.equal(await page.locator('h1').innerText(), 'General Assistant');

    // Shift+Enter adds a line instead of sending.
    await page.fill('textarea[name=message]', 'first line');
    await page.press('textarea[name=message]', 'Shift+Enter');
    await page.keyboard.type('second line');
    assert.equal(await page.inputValue('textarea[name=message]'), 'first line\nsecond line');
    assert.equal(await page.locator('.transcript > article.message').count(), 0);

    await send(page, 'Count [words:12]');
    // Mid-stream: the reply is visible while it is still being written.
    await page.waitForFunction(() => {
      const reply = document.querySelector('.transcript > article.message.assistant.streaming');
      return reply && reply.innerText.includes('word2') && !reply.innerText.includes('word11');
    });
    assert.equal(await page.locator('button.stop').count(), 1, 'Stop is offered while streaming');
    await replyFinished(page);
    assert.match(await lastReply(page).innerText(), /word0 word1 .* word11/);

    await send(page, 'second question');
    await replyFinished(page);
    assert.deepEqual(await transcript(page), [
      ['user', 'Count [words:12]'],
      ['assistant', 'word0 word1 word2 word3 word4 word5 word6 word7 word8 word9 word10 word11'],
      ['user', 'second question'],
      ['assistant', 'Echo: second question'],
    ]);
    const url = page.url();
    assert.match(url, /[?&]session=[0-9a-f]{32}/, 'the conversation is in the URL');
    const sidebar = page.locator('.conversations a');
    assert.equal(await sidebar.count(), 1);
    assert.equal(await sidebar.first().innerText(), 'Count [words:12]');

    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    assert.equal(page.url(), url);
    assert.equal((await transcript(page)).length, 4, 'the transcript survives a reload');
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('the code behind the buttons is fetched on first use; when it cannot be, nothing is lost', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`, { hydrated: false });
    const fetched = [];
    page.on('request', (r) => { if (/\/pkg\/[0-9a-f]{16}\/(split|chunk)_[^/]*\.wasm$/.test(r.url())) fetched.push(r.url()); });
    // The actions' own modules fail; the module they share loads.
    await page.route(/\/pkg\/[0-9a-f]{16}\/split_[^/]*\.wasm$/, (route) => route.abort());
    await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    // Opening a conversation and reading it does not download the actions' module.
    await page.mouse.wheel(0, 200);
    assert.deepEqual(fetched, []);

    await send(page, 'keep this draft');
    const alert = page.locator('.error-row[role=alert]');
    await alert.waitFor();
    assert.match(await alert.innerText(), /could not be loaded/);
    assert.equal(await page.inputValue('textarea[name=message]'), 'keep this draft', 'the draft stays in the composer');
    assert.equal(await page.locator('.transcript > article.message').count(), 0, 'nothing was sent');
    assert.ok(fetched.length >= 1, 'the module was asked for once the user acted');

    // Reachable again: the same action now goes through, and the notice goes away.
    await page.unroute(/\/pkg\/[0-9a-f]{16}\/split_[^/]*\.wasm$/);
    await page.press('textarea[name=message]', 'Enter');
    await replyFinished(page);
    assert.deepEqual(await transcript(page), [
      ['user', 'keep this draft'],
      ['assistant', 'Echo: keep this draft'],
    ]);
    assert.equal(await alert.count(), 0);
    // Chatting fetches the turn's code only: the other actions' module waits for its first use.
    assert.ok(fetched.some((u) => u.includes('split_parlor_turns')), fetched.join(' '));
    assert.ok(!fetched.some((u) => u.includes('split_parlor_other_actions')), fetched.join(' '));
    // The build's loader starts an action's module and the shared one together and awaits the
    // shared one first, so the browser reports the aborted fetch's rejection before the loader
    // handles it: that report, and nothing else.
    assert.deepEqual(errors.filter((e) => e !== 'Failed to fetch'), []);
    await context.close();
  });

  test('Stop cancels a slow reply and keeps the partial text, marked stopped', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    await send(page, 'tell me a long story [slow]');
    await page.waitForFunction(() => document.querySelector('.message.assistant.streaming')?.innerText.includes('word2'));
    await page.click('button.stop');
    await page.waitForSelector('.message.assistant .stopped-tag');
    const partial = await lastReply(page).locator('.bubble').innerText();
    assert.match(partial, /^word0 word1 word2/);
    assert.doesNotMatch(partial, /word59/);
    assert.equal(await page.locator('button.send').count(), 1, 'the composer is ready again');

    // The partial reply was stored as stopped.
    await page.waitForTimeout(300);
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    const stored = await lastReply(page).locator('.bubble').innerText();
    assert.ok(stored.startsWith(partial.trim().slice(0, 10)), `${stored} vs ${partial}`);
    assert.equal(await lastReply(page).locator('.stopped-tag').count(), 1);
    await context.close();
  });

  test('an upstream error shows inline with Retry, which then succeeds', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    await send(page, 'hello [fail-once]');
    const error = page.locator('.error-row');
    await error.waitFor();
    assert.match(await error.innerText(), /HTTP 503.*overloaded/s);
    assert.deepEqual(await transcript(page), [['user', 'hello [fail-once]']], 'the message stays');

    await error.locator('button.retry').click();
    await replyFinished(page);
    assert.equal(await page.locator('.error-row').count(), 0);
    assert.deepEqual(await transcript(page), [
      ['user', 'hello [fail-once]'],
      ['assistant', 'Echo: hello [fail-once]'],
    ]);
    await context.close();
  });

  test('model output cannot inject HTML or script', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    await send(page, '<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> [x](javascript:window.pwned=3)');
    await replyFinished(page);
    const reply = lastReply(page);
    assert.equal(await reply.locator('img, script').count(), 0);
    assert.equal(await reply.locator('a').count(), 0);
    assert.match(await reply.innerText(), /<img src=x/);
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    // Reloaded, the text is in the island's data too (JSON in a script element): it can
    // neither end that element nor run, and the page still hydrates with it.
    await page.reload();
    await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    assert.equal((await transcript(page)).length, 2);
    assert.match(await lastReply(page).innerText(), /<script>window.pwned=2<\/script>/);
    assert.equal(await page.locator('script:not([type]), script[type=module]').evaluateAll(
      (scripts) => scripts.filter((s) => s.textContent.includes('pwned')).length), 0);
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    await context.close();
  });

  test('Regenerate replaces the last reply; New chat starts over; the sidebar switches back', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=concise`);
    await send(page, 'original');
    await replyFinished(page);
    await page.click('.message.assistant .regenerate');
    await replyFinished(page);
    assert.equal((await transcript(page)).length, 2, 'the reply was replaced, not added');
    const firstUrl = page.url();

    await page.click('.sidebar .new-chat');
    assert.equal(await page.locator('.transcript > article.message').count(), 0);
    assert.doesNotMatch(page.url(), /session=/);
    await send(page, 'another topic');
    await replyFinished(page);
    const titles = await page.locator('.conversations a').allInnerTexts();
    assert.deepEqual(titles.slice(0, 2), ['another topic', 'original'], 'newest first');

    await page.click('.conversations a:has-text("original")');
    await page.waitForURL(firstUrl);
    await page.waitForSelector('body[data-hydrated]');
    assert.deepEqual((await transcript(page))[0], ['user', 'original']);
    await context.close();
  });

  test('Copy puts the reply on the clipboard', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: suite.parlor.url });
    await send(page, 'copy **this**');
    await replyFinished(page);
    assert.equal(await lastReply(page).locator('strong').innerText(), 'this', 'Markdown is rendered');
    await lastReply(page).locator('button.copy').click();
    await page.waitForSelector('button.copy:has-text("Copied")');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'Echo: copy **this**');
    await context.close();
  });
});
