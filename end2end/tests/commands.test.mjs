// `!` commands in the browser: switching model shows Parlor's notice and the new window.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { openChat, replyFinished, send, withUpstream } from './harness.mjs';

const config = join(mkdtempSync(join(tmpdir(), 'parlor-config-')), 'parlor.toml');
writeFileSync(config, `
[[models]]
name = "small"
model = "small-upstream"
max_context = 2
`);

describe('chat commands', () => {
  const suite = withUpstream({ PARLOR_CONFIG: config });
  const fact = (page, name) => page.locator(`[data-fact="${name}"]`).innerText();

  test('!model switches the model, says what was trimmed, and the debug panel shows the new window', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general&debug=true`);
    for (const text of ['one', 'two', 'three']) {
      await send(page, text);
      await replyFinished(page);
    }
    assert.equal(await page.locator('.message.not-sent').count(), 0);

    await send(page, '!model small');
    const notice = page.locator('.message.command-notice');
    await notice.waitFor();
    assert.equal(
      (await notice.innerText()).trim(),
      "Model set to 'small'.\nHistory trimmed: 4 message(s) removed (2 kept).",
    );
    // The panel shows the new model and window at once, and dims what falls out of it.
    await page.waitForFunction(() => document.querySelector('[data-fact="model"]')?.innerText.startsWith('small'));
    assert.match(await fact(page, 'window'), /^2 messages/);
    assert.match(await fact(page, 'chain'), /sliding_window\s*−4/);
    assert.equal(await page.locator('.message.not-sent').count(), 4);
    // Neither the command nor the notice is part of the conversation.
    assert.equal(await page.locator('.message.command-notice .actions button').count(), 0);

    await send(page, 'four');
    await replyFinished(page);
    assert.match(await fact(page, 'model'), /^small/);
    const sent = (await suite.fake.requests()).at(-1);
    assert.equal(sent.model, 'small-upstream');

    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    assert.match(await fact(page, 'model'), /^small/, 'the choice survives a reload');
    assert.equal(await page.locator('.message.command-notice').count(), 0);

    // The model picker sends the same command.
    assert.equal(await page.locator('.model-picker').inputValue(), 'small');
    await page.selectOption('.model-picker', 'gpt-4o-mini');
    await page.locator('.message.command-notice').waitFor();
    assert.match(await page.locator('.message.command-notice').innerText(), /^Model set to 'gpt-4o-mini'\./);
    await page.waitForFunction(() => document.querySelector('[data-fact="model"]')?.innerText.startsWith('gpt-4o-mini'));
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('!reset empties the conversation on screen and after a reload', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    await send(page, 'forget me');
    await replyFinished(page);
    await send(page, '!reset');
    await page.locator('.message.command-notice').waitFor();
    assert.match(await page.locator('.message.command-notice').innerText(), /^Conversation cleared\. A backup was kept/);
    assert.equal(await page.locator('.transcript').innerText().then((t) => t.includes('forget me')), false);
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    assert.equal(await page.locator('article.message[data-role]').count(), 0);
    assert.equal((await page.locator('.transcript').innerText()).includes('forget me'), false);
    assert.deepEqual(errors, []);
    await context.close();
  });
});
