// The end of the abuse run (scripts/load.sh): a real browser opens a chat, comes back with its
// cookie, and chats, after the abusive requests. Prints a JSON line; exits non-zero if it
// could not.   node scripts/browser-gets-in.mjs URL
import { chromium } from 'playwright-core';

const [url] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const page = await browser.newPage();
const first = await page.goto(`${url}/chat?agent=general`);
const back = await page.goto(`${url}/chat?agent=general`);
await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
await page.fill('textarea[name=message]', 'am I in?');
await page.press('textarea[name=message]', 'Enter');
await page.waitForFunction(
  () => [...document.querySelectorAll('.message.assistant')].some((m) => m.innerText.includes('I received')),
  null, { timeout: 30000 });
console.log(JSON.stringify({ real_browser_first_visit: first.status(), real_browser_return_visit: back.status(), real_browser_chatted: true }));
await browser.close();
