// Attaching files to a message with a retention, and seeing them expire, in real Chromium
// with the offline mirror model (which names the context blocks it received).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { launchBrowser, lastReply, openChat, replyFinished, send, startParlor } from './harness.mjs';

// A 1×1 PNG.
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==',
  'base64');

describe('attachments with retention', () => {
  let parlor, browser;
  before(async () => {
    parlor = await startParlor({ PARLOR_MIRROR_DELAY_MS: '1' });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await parlor?.stop();
  });

  test('a text file kept for the next turn is seen on its turn and the next, then expires', async () => {
    const { page, context, errors } = await openChat(browser, `${parlor.url}/chat?agent=general`);
    await page.setInputFiles('input[name=attach]', {
      name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('the build fails on line 42'),
    });
    const pending = page.locator('.attachment[data-name="notes.txt"]');
    await pending.waitFor();
    await pending.locator('select.keep').selectOption('1');

    await send(page, 'what is in my notes?');
    await replyFinished(page);
    const seen = /context from “notes\.txt”: text “the build fails on line 42”/;
    assert.match(await lastReply(page).innerText(), seen, 'on its own turn');
    assert.equal(await page.locator('.attachment').count(), 0, 'the composer is empty again');
    const chip = page.locator('.message.user .chip[data-source="notes.txt"]');
    assert.match(await chip.innerText(), /notes\.txt\s+text\s+next turn/);

    await send(page, 'and now?');
    await replyFinished(page);
    assert.match(await lastReply(page).innerText(), seen, 'on the next turn, from the history');
    assert.equal(await chip.evaluate((n) => n.classList.contains('expired')), false);

    await send(page, 'and the third time?');
    await replyFinished(page);
    assert.doesNotMatch(await lastReply(page).innerText(), /notes\.txt/, 'gone on the third');
    await page.waitForSelector('.message.user .chip.expired[data-source="notes.txt"]');
    assert.match(await chip.innerText(), /expired/);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('images and dropped files go with the message; files Parlor cannot send are refused before upload', async () => {
    const { page, context } = await openChat(browser, `${parlor.url}/chat?agent=general`);
    await page.setInputFiles('input[name=attach]', [
      { name: 'shot.png', mimeType: 'image/png', buffer: PNG },
      { name: 'archive.zip', mimeType: 'application/zip', buffer: Buffer.from('PK') },
    ]);
    await page.waitForSelector('.attachment[data-name="shot.png"]');
    assert.match(await page.locator('.attach-error').innerText(), /archive\.zip: only text files/);
    // A text file over the limit is refused with its size, before anything is uploaded.
    await page.setInputFiles('input[name=attach]', {
      name: 'huge.log', mimeType: 'text/plain', buffer: Buffer.alloc(600 * 1024, 'x'),
    });
    await page.waitForFunction(() => /huge\.log is 600 KB; text files can be at most 512 KB/
      .test(document.querySelector('.attach-error')?.innerText ?? ''));
    // Drag and drop.
    const dropped = await page.evaluateHandle(() => {
      const transfer = new DataTransfer();
      transfer.items.add(new File(['# Plan\n\nship it'], 'plan.md', { type: 'text/markdown' }));
      return transfer;
    });
    await page.dispatchEvent('form.composer', 'drop', { dataTransfer: dropped });
    await page.waitForSelector('.attachment[data-name="plan.md"]');

    await send(page, 'look at these');
    await replyFinished(page);
    const reply = await lastReply(page).innerText();
    assert.match(reply, /context from “shot\.png”: image \(image\/png\)/);
    assert.match(reply, /context from “plan\.md”: text “\\?# Plan ship it”/);
    const chips = await page.locator('.message.user .chip').allInnerTexts();
    assert.equal(chips.length, 2);
    assert.match(chips[0], /shot\.png\s+image\s+this message only/);
    await context.close();
  });

  test('saved context shows as chips when the conversation is opened again', async () => {
    const { page, context } = await openChat(browser, `${parlor.url}/chat?agent=general`);
    await page.setInputFiles('input[name=attach]', {
      name: 'spec.md', mimeType: 'text/markdown', buffer: Buffer.from('keep this'),
    });
    await page.locator('.attachment[data-name="spec.md"] select.keep').selectOption('always');
    await send(page, 'remember the spec');
    await replyFinished(page);
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    const chip = page.locator('.message.user .chip[data-source="spec.md"]');
    assert.match(await chip.innerText(), /spec\.md\s+text\s+always/);
    await context.close();
  });
});
