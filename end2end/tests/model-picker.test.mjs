// The model picker: each model with its provider, window and prices; chosen by keyboard at
// 375 px, the conversation's next turn goes to it and the meter follows at once.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { openChat, replyFinished, send, withUpstream } from './harness.mjs';

const config = join(mkdtempSync(join(tmpdir(), 'parlor-config-')), 'parlor.toml');
writeFileSync(config, `
[[models]]
name = "roomy"
model = "roomy-upstream"
context_tokens = 64000
price_in = 0.5
price_out = 1.5
`);

describe('model picker', () => {
  const suite = withUpstream({ PARLOR_CONFIG: config });

  test('shows each model with its window and prices, and switches by keyboard on a phone', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`, { width: 375, height: 740 });
    await send(page, 'hello');
    await replyFinished(page);
    const picker = page.locator('.model-picker');
    const options = await picker.locator('option').allInnerTexts();
    assert.equal(options.length, 2, options.join(' | '));
    assert.ok(options.some((o) => o.startsWith('roomy — openai-compatible · 64,000 tokens · $0.5 in / $1.5 out per M')), options.join(' | '));
    // The picker fits the phone's width.
    const box = await picker.boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 375, JSON.stringify(box));
    const meterBefore = await page.locator('.meter summary').innerText();

    // By keyboard: focus the picker and move to the next model.
    const current = await picker.inputValue();
    await picker.focus();
    await page.keyboard.press(current === 'roomy' ? 'ArrowUp' : 'ArrowDown');
    await page.locator('.message.command-notice').waitFor();
    assert.match(await page.locator('.message.command-notice').innerText(), /^Model set to 'roomy'\./);
    assert.equal(await picker.inputValue(), 'roomy');
    // The meter follows at once: measured against the new model's 64,000-token window.
    await page.waitForFunction((before) => document.querySelector('.meter summary')?.innerText !== before, meterBefore);
    const face = await page.locator('.meter summary').innerText();
    assert.match(face, /64,000|64k/i, face);
    assert.match(await page.locator('.meter-details').textContent(), /Cost, conversation/);

    await send(page, 'and now?');
    await replyFinished(page);
    assert.equal((await suite.fake.requests()).at(-1).model, 'roomy-upstream');
    assert.deepEqual(errors, []);
    await context.close();
  });
});
