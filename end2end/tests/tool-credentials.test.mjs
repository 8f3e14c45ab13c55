// A per-user tool server that needs the user's own value, in real headless Chromium: the
// chat says the server is not available and links to Tool credentials; the value set there
// reaches the user's own process on the next turn, and is never shown again.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { launchBrowser, openChat, replyFinished, root, send, startParlor } from './harness.mjs';

const hostile = join(root, 'testing', 'hostile-mcp.py');
const config = `
[[mcp_servers]]
id = "vault"
command = "python3"
args = [${JSON.stringify(hostile)}]
env = { PATH = ${JSON.stringify(process.env.PATH ?? '/usr/bin:/bin')} }
scope = "per_user"
user_secrets = ["VAULT_TOKEN"]
`;

const ASK = '/tool vault__env {"name": "VAULT_TOKEN"}';

describe('tool credentials', () => {
  let parlor, browser, dir;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'parlor-credentials-'));
    writeFileSync(join(dir, 'parlor.toml'), config);
    mkdirSync(join(dir, 'agents', 'keeper'), { recursive: true });
    writeFileSync(join(dir, 'agents', 'keeper', 'template.json'), JSON.stringify({
      agentId: 'keeper',
      name: 'Keeper',
      description: 'Uses a server with your own token.',
      personality: 'You keep secrets.',
      chatSettings: { tools: ['vault'], historyPolicy: 'all' },
    }));
    parlor = await startParlor({
      PARLOR_CONFIG: join(dir, 'parlor.toml'),
      PARLOR_AGENTS_DIR: join(dir, 'agents'),
      PARLOR_MIRROR_DELAY_MS: '2',
    });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await parlor?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('an unavailable server links to Tool credentials; the value set there is used', async () => {
    const { page, context, errors } = await openChat(browser, `${parlor.url}/chat?agent=keeper`,
      { width: 375, height: 740 });
    await send(page, ASK);
    await replyFinished(page);
    const notice = page.locator('.transcript > article.message', { hasText: 'not available to you' });
    assert.match(await notice.innerText(), /vault.*VAULT_TOKEN/s);
    const link = notice.locator('a', { hasText: 'Set your tool credentials' });
    assert.equal(await link.getAttribute('href'), '/account/tools');
    await page.screenshot({ path: '/tmp/parlor-tool-unavailable.png', fullPage: true });

    await link.click();
    await page.waitForURL(/\/account\/tools$/);
    const row = page.locator('li', { hasText: 'VAULT_TOKEN' });
    assert.match(await row.innerText(), /\(not set\)/);
    await row.locator('input[name=value]').fill('s3cret-value');
    await row.locator('button', { hasText: 'Save' }).click();
    await page.waitForSelector('[role=status]');
    assert.match(await page.locator('[role=status]').innerText(), /VAULT_TOKEN of vault is set/);
    assert.match(await page.locator('li', { hasText: 'VAULT_TOKEN' }).innerText(), /\(set\)/);
    assert.ok(!(await page.content()).includes('s3cret-value'), 'the value is never shown again');

    await page.goto(`${parlor.url}/chat?agent=keeper`);
    await page.waitForSelector('body[data-hydrated]');
    await send(page, ASK);
    await replyFinished(page);
    const card = page.locator('.transcript > article.message.tool .tool-card').last();
    await card.locator('summary').click();
    assert.match(await card.locator('.tool-result pre').innerText(), /^s3cret-value pid=\d+/);
    assert.deepEqual(errors, []);
    await context.close();
  });
});
