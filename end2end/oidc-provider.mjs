// A real OpenID provider for the browser tests: the npm package oidc-provider, with one client
// registered for Parlor and its development login pages (any login name is accepted; its
// password field is ignored). Usage: node oidc-provider.mjs PORT REDIRECT_URI
//
// A login name is the account: `ada@example.com` gets the e-mail ada@example.com, the
// preferred_username `ada`, and the group `parlor-admins` when the name starts with `admin`;
// a name starting with `unverified` gets `email_verified: false` (anyone may type any
// address into an account at many providers).
import Provider from 'oidc-provider';

const [port, redirect] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'parlor',
    client_secret: 'parlor-test-secret',
    redirect_uris: [redirect],
    grant_types: ['authorization_code'],
    response_types: ['code'],
  }],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  // The claims of the scopes asked for go into the ID token itself (as Keycloak does).
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: `sub-${id}`,
          email: id,
          email_verified: !id.startsWith('unverified'),
          preferred_username: id.split('@')[0],
          name: id,
          groups: id.startsWith('admin') ? ['parlor-admins', 'staff'] : ['staff'],
        };
      },
    };
  },
  features: { devInteractions: { enabled: true } },
  // Quiet: the tests read what matters.
  renderError(ctx, out) {
    ctx.type = 'html';
    ctx.body = `<p>${out.error}: ${out.error_description ?? ''}</p>`;
  },
});
provider.proxy = false;
process.on('warning', () => {});
provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
