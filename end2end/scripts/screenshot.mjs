// Takes a screenshot of a Parlor page: node scripts/screenshot.mjs URL OUT.png [WIDTH] [MESSAGE]
// With MESSAGE, types it into the composer, presses Enter and waits for the reply to finish.
import { chromium } from 'playwright-core';

const [url, out, width = '1200', message] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const page = await browser.newPage({ viewport: { width: Number(width), height: 800 } });
page.on('console', (m) => console.log(`console.${m.type()}: ${m.text()}`));
page.on('pageerror', (e) => console.log(`pageerror: ${e.message}`));
await page.goto(url);
await page.waitForSelector('body[data-hydrated]', { timeout: 20000 }).catch(() => console.log('not hydrated'));
if (message) {
  await page.fill('textarea', message);
  await page.press('textarea', 'Enter');
  await page.waitForSelector('.message.assistant:not(.streaming) .actions, .command-notice', { timeout: 20000 });
}
await page.screenshot({ path: out, fullPage: false });
await browser.close();
