// axe-core (WCAG 2.x A and AA) on the home page and on a chat page with its debug panel, in
// the wide, the 375 px and the dark layouts: no serious or critical fault.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, test } from 'node:test';
import { openChat, replyFinished, send, withUpstream } from './harness.mjs';

// Evaluated through the DevTools protocol: the page's Content Security Policy (rightly)
// refuses injected script tags.
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const layouts = [
  { name: 'wide', width: 1200, height: 800, colorScheme: 'light' },
  { name: '375 px', width: 375, height: 740, colorScheme: 'light' },
  { name: 'dark', width: 1200, height: 800, colorScheme: 'dark' },
];

/** The serious and critical faults axe finds on the page, as "rule: target" lines. */
async function faults(page) {
  await page.evaluate(axeSource);
  const result = await page.evaluate(() =>
    globalThis.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } }));
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .flatMap((v) => v.nodes.map((n) => `${v.id}: ${n.target.join(' ')}`));
}

describe('accessibility', () => {
  const suite = withUpstream();

  for (const layout of layouts) {
    test(`home and chat with the debug panel, ${layout.name}`, async () => {
      const home = await openChat(suite.browser, `${suite.parlor.url}/`, { ...layout, hydrated: false });
      assert.deepEqual(await faults(home.page), [], 'home page');
      await home.context.close();
      const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general&debug=true`, layout);
      await send(page, 'hello');
      await replyFinished(page);
      assert.deepEqual(await faults(page), [], 'chat page');
      assert.deepEqual(errors, []);
      await context.close();
    });
  }
});
