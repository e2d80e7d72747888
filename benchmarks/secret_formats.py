"""A corpus of secret formats kept apart from the tests' (``tests/secret_corpus.py``), to
measure recall on kinds the rules were not written against one by one: ``FORMATS`` is
(kind, text as it turns up, the secret in it), at least 150 kinds, built from public
references on secret formats (the providers' documented token prefixes and lengths,
the tools' documented password flags and configuration files). Values are made from a
hash of their name: none is a real credential.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from secret_corpus import ALNUM, B64, HEX, LOWER, UPPER, URLSAFE, fake

DIGITS = "0123456789"
FORMATS: list[tuple[str, str, str]] = []


def add(kind: str, template: str, secret: str) -> None:
    FORMATS.append((kind, template.replace("{s}", secret), secret))


def word_password(name: str) -> str:
    """A password as people choose them: words, a digit, a sign."""
    return fake(name, 6, LOWER[:26]).capitalize() + fake(name + "d", 3, DIGITS) + "!" + \
        fake(name + "w", 4, LOWER[:26])


# -- passwords on command lines: each program's own flag ------------------------------------
add("gpg-passphrase", "gpg --batch --yes --passphrase {s} -c backup.tar", word_password("gpg"))
add("ssh-keygen-passphrase", "ssh-keygen -t ed25519 -N '{s}' -f ~/.ssh/deploy",
    word_password("ssh"))
add("sqlcmd-password", "sqlcmd -S db.internal -U sa -P {s} -Q 'SELECT 1'", word_password("sql"))
add("zip-password", "zip -r -P {s} release.zip dist/", word_password("zip"))
add("7z-password", "7z a -p{s} secrets.7z notes/", word_password("7z"))
add("openssl-passin", "openssl rsa -in key.pem -passin pass:{s} -out plain.pem",
    word_password("ossl"))
add("openssl-enc-key", "openssl enc -aes-256-cbc -k {s} -in db.sql -out db.enc",
    word_password("oenc"))
add("ldap-bind-password", "ldapsearch -x -H ldap://dc1 -D cn=admin,dc=corp -w {s} -b dc=corp",
    word_password("ldap"))
add("mongo-password", "mongosh --host db1 -u admin -p {s} --authenticationDatabase admin",
    word_password("mongo"))
add("smbclient-password", "smbclient //fs/share -U backup%{s} -c ls", word_password("smb"))
add("htpasswd-password", "htpasswd -b -c .htpasswd admin {s}", word_password("htp"))
add("keytool-storepass", "keytool -list -keystore app.jks -storepass {s}", word_password("kt"))
add("mysql-password", "mysql -h 10.0.0.5 -u root -p{s} shop", word_password("my"))
add("redis-cli-password", "redis-cli -h cache -a {s} ping", word_password("rcli"))
add("sshpass-password", "sshpass -p '{s}' ssh deploy@web1", word_password("sshp"))
add("curl-basic-password", "curl -u ci:{s} https://nexus.internal/repo", word_password("curl"))
add("wget-password", "wget --user=ci --password={s} https://files.internal/a.tgz",
    word_password("wget"))
add("docker-login-password", "docker login registry.internal -u ci -p {s}",
    word_password("dock"))
add("helm-repo-password", "helm repo add internal https://charts.internal --username ci"
    " --password {s}", word_password("helm"))
add("az-login-password", "az login -u ops@corp.example -p {s}", word_password("az"))
add("db-flag-password", "./manage.py migrate --db-password={s}", word_password("dbf"))
add("vault-token-flag", "vault kv get -address=https://vault:8200 -token={s} secret/app",
    "hvs." + fake("vtf", 24, URLSAFE))

# -- .env and configuration keys: the name says secret ----------------------------------------
ENV = {
    "laravel-app-key": ("APP_KEY", "base64:" + base64.b64encode(fake("lar", 32).encode()).decode()),
    "rails-master-key": ("RAILS_MASTER_KEY", fake("rmk", 32, HEX)),
    "db-pw": ("DB_PW", word_password("dbpw")),
    "rails-secret-key-base": ("SECRET_KEY_BASE", fake("skb", 128, HEX)),
    "django-secret-key": ("DJANGO_SECRET_KEY", fake("dj", 50, ALNUM + "!@#%^&*(-_=+)")),
    "flask-secret-key": ("FLASK_SECRET_KEY", fake("fl", 32, HEX)),
    "nextauth-secret": ("NEXTAUTH_SECRET", fake("na", 44, B64)),
    "jwt-secret": ("JWT_SECRET", fake("jwt", 40)),
    "session-secret": ("SESSION_SECRET", fake("ses", 32)),
    "cookie-secret": ("COOKIE_SECRET", fake("cook", 32)),
    "encryption-key": ("ENCRYPTION_KEY", fake("enc", 64, HEX)),
    "webhook-secret": ("GITHUB_WEBHOOK_SECRET", fake("whs", 40, HEX)),
    "smtp-password": ("SMTP_PASSWORD", word_password("smtp")),
    "mail-password": ("MAIL_PASSWORD", word_password("mail")),
    "redis-password": ("REDIS_PASSWORD", fake("redis", 24)),
    "postgres-password": ("POSTGRES_PASSWORD", word_password("pg")),
    "mysql-root-password": ("MYSQL_ROOT_PASSWORD", word_password("myr")),
    "mongo-root-password": ("MONGO_INITDB_ROOT_PASSWORD", word_password("mgr")),
    "rabbitmq-pass": ("RABBITMQ_DEFAULT_PASS", word_password("rmq")),
    "elastic-password": ("ELASTIC_PASSWORD", word_password("els")),
    "keycloak-admin-password": ("KEYCLOAK_ADMIN_PASSWORD", word_password("kc")),
    "grafana-admin-password": ("GF_SECURITY_ADMIN_PASSWORD", word_password("gf")),
    "minio-root-password": ("MINIO_ROOT_PASSWORD", fake("minio", 40)),
    "auth0-client-secret": ("AUTH0_CLIENT_SECRET", fake("a0", 64, URLSAFE)),
    "datadog-api-key": ("DD_API_KEY", fake("dd", 32, HEX)),
    "datadog-app-key": ("DD_APP_KEY", fake("dda", 40, HEX)),
    "cloudflare-api-token": ("CLOUDFLARE_API_TOKEN", fake("cf", 40, URLSAFE)),
    "vercel-token": ("VERCEL_TOKEN", fake("vc", 24)),
    "netlify-auth-token": ("NETLIFY_AUTH_TOKEN", fake("nl", 43, URLSAFE)),
    "firebase-token": ("FIREBASE_TOKEN", "1//" + fake("fbt", 100, URLSAFE)),
    "algolia-admin-key": ("ALGOLIA_ADMIN_API_KEY", fake("alg", 32, HEX)),
    "pusher-secret": ("PUSHER_APP_SECRET", fake("push", 20, HEX)),
    "segment-write-key": ("SEGMENT_WRITE_KEY", fake("seg", 32)),
    "rollbar-token": ("ROLLBAR_ACCESS_TOKEN", fake("rb", 32, HEX)),
    "bugsnag-key": ("BUGSNAG_API_KEY", fake("bs", 32, HEX)),
    "plaid-secret": ("PLAID_SECRET", fake("plaid", 30, HEX)),
    "braintree-private-key": ("BRAINTREE_PRIVATE_KEY", fake("bt", 32, HEX)),
    "paypal-client-secret": ("PAYPAL_CLIENT_SECRET", "E" + fake("pp", 79, URLSAFE)),
    "coinbase-api-secret": ("COINBASE_API_SECRET", fake("cb", 32)),
    "binance-secret": ("BINANCE_SECRET_KEY", fake("bn", 64)),
    "twitter-api-secret": ("TWITTER_API_SECRET", fake("tw", 50)),
    "linkedin-client-secret": ("LINKEDIN_CLIENT_SECRET", fake("li", 16)),
    "zoom-client-secret": ("ZOOM_CLIENT_SECRET", fake("zoom", 32)),
    "intercom-token": ("INTERCOM_ACCESS_TOKEN", "dG9rOj" + fake("ic", 54, B64)),
    "zendesk-token": ("ZENDESK_API_TOKEN", fake("zd", 40)),
    "trello-token": ("TRELLO_TOKEN", fake("tr", 64, HEX)),
    "mistral-key": ("MISTRAL_API_KEY", fake("mis", 32)),
    "cohere-key": ("COHERE_API_KEY", fake("coh", 40)),
    "together-key": ("TOGETHER_API_KEY", fake("tog", 64, HEX)),
    "heroku-api-key": ("HEROKU_API_KEY", f"{fake('hk1', 8, HEX)}-{fake('hk2', 4, HEX)}-"
                       f"{fake('hk3', 4, HEX)}-{fake('hk4', 4, HEX)}-{fake('hk5', 12, HEX)}"),
    "aws-session-token": ("AWS_SESSION_TOKEN", "IQoJb3JpZ2luX2Vj" + fake("ast", 200, B64)),
    "azure-client-secret-env": ("AZURE_CLIENT_SECRET", fake("acs", 40, URLSAFE + "~.")),
    "gcp-credentials-json-key": ("GOOGLE_PRIVATE_KEY_ID", fake("gpk", 40, HEX)),
    "mapbox-secret-env": ("MAPBOX_SECRET", fake("mbs", 32)),
    "signing-key": ("SIGNING_KEY", fake("sgk", 44, B64)),
    "master-key": ("MASTER_KEY", fake("mk", 32, HEX)),
}
for kind, (name, value) in ENV.items():
    add(kind, f"{name}={{s}}", value)

# -- headers ----------------------------------------------------------------------------------
add("x-api-key-header", "curl -H 'X-API-Key: {s}' https://api.internal/v1", fake("xak", 32))
add("x-auth-token-header", "X-Auth-Token: {s}", fake("xat", 40, HEX))
add("gitlab-private-token-header", "curl --header \"PRIVATE-TOKEN: {s}\" https://gitlab.corp/api",
    fake("gpt", 20, URLSAFE))
add("vault-token-header", "curl -H \"X-Vault-Token: {s}\" https://vault:8200/v1/secret",
    "hvs." + fake("vth", 90, URLSAFE))
add("apim-subscription-key", "Ocp-Apim-Subscription-Key: {s}", fake("apim", 32, HEX))
add("rapidapi-key", "'X-RapidAPI-Key': '{s}'", fake("rapid", 50))
add("okta-ssws", "Authorization: SSWS {s}", "00" + fake("okta", 40, URLSAFE))
add("basic-auth-header", "Authorization: Basic {s}",
    base64.b64encode(f"ci:{word_password('bah')}".encode()).decode())
add("session-cookie", "Cookie: sessionid={s}; csrftoken=abc", fake("sid", 32, LOWER))
add("supabase-apikey-header", "apikey: {s}",
    "eyJ" + fake("sb1", 30, URLSAFE) + ".eyJ" + fake("sb2", 60, URLSAFE) + "." +
    fake("sb3", 43, URLSAFE))

# -- URLs -----------------------------------------------------------------------------------
add("url-password-at", "DATABASE_URL=postgres://app:{s}@db.internal:5432/app", "p@ss#" +
    fake("upa", 10))
add("mongodb-srv-password", "mongodb+srv://app:{s}@cluster0.abcde.mongodb.net/db",
    fake("msrv", 20))
add("amqp-password", "amqp://worker:{s}@rabbit:5672/vhost", fake("amqp", 18))
add("redis-url-password", "REDIS_URL=redis://:{s}@cache:6379/0", fake("rurl", 24))
add("ftp-url-password", "ftp://upload:{s}@ftp.corp.example/in/", word_password("ftp"))
add("smtp-url-password", "EMAIL_URL=smtp://mailer:{s}@smtp.corp.example:587", fake("smtpu", 16))
add("git-https-token", "git clone https://x-access-token:{s}@github.com/acme/infra",
    "ghs_" + fake("ghs", 36))
add("aws-presigned-signature", "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Date=20260101T000000Z&X-Amz-Expires=900&X-Amz-Signature={s}", fake("amzs", 64, HEX))
add("gcs-presigned-signature", "https://storage.googleapis.com/b/o?X-Goog-Algorithm="
    "GOOG4-RSA-SHA256&X-Goog-Signature={s}", fake("goog", 256, HEX))
add("cloudfront-signature", "https://d1.cloudfront.net/v.mp4?Expires=1767225600&Signature={s}"
    "&Key-Pair-Id=K2JCJMDEHXQW5F", fake("cfs", 120, URLSAFE + "~"))
add("url-access-token", "https://graph.facebook.com/me?access_token={s}",
    fake("uat", 60, ALNUM))
add("url-client-secret", "https://oauth.corp/token?client_id=web&client_secret={s}",
    fake("ucs", 32))
add("jdbc-password", "jdbc:mysql://db:3306/shop?user=app&password={s}", word_password("jdbc"))

# -- files and structured values -----------------------------------------------------------
add("kubernetes-secret-data", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: api\ntype: Opaque"
    "\ndata:\n  api-token: {s}\n", base64.b64encode(fake("k8s", 30).encode()).decode())
add("kubernetes-secret-stringdata", "kind: Secret\napiVersion: v1\nstringData:\n  license: {s}\n",
    fake("k8ss", 28))
add("docker-config-auth", '{"auths": {"registry.corp": {"auth": "{s}"}}}',
    base64.b64encode(f"ci:{word_password('dca')}".encode()).decode())
add("pypirc-password", "[pypi]\nusername = __token__\npassword = {s}\n",
    "pypi-" + fake("pypirc", 80, URLSAFE))
add("maven-settings-password", "<servers><server><id>nexus</id><username>ci</username>"
    "<password>{s}</password></server></servers>", word_password("mvn"))
add("nuget-cleartext-password", '<packageSourceCredentials><corp><add key="Username" value="ci" />'
    '<add key="ClearTextPassword" value="{s}" /></corp></packageSourceCredentials>',
    word_password("nuget"))
add("gradle-signing-password", "signing.keyId=24875D73\nsigning.password={s}\n",
    word_password("grd"))
add("gradle-ossrh-password", "ossrhPassword={s}", word_password("ossrh"))
add("jwk-private-d", '{"kty": "EC", "crv": "P-256", "x": '
    '"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "d": "{s}"}', fake("jwkd", 43, URLSAFE))
add("jwk-symmetric-k", '{"keys": [{"kty": "oct", "alg": "HS256", "k": "{s}"}]}',
    fake("jwkk", 43, URLSAFE))
add("aws-credentials-file", "[default]\naws_access_key_id = AKIA" + fake("acf", 16, UPPER) +
    "\naws_secret_access_key = {s}\n", fake("acfs", 40, B64))
add("netrc-password", "machine api.heroku.com\n  login ops@corp.example\n  password {s}\n",
    fake("netrc", 36, HEX))
add("pgpass-line", "db.internal:5432:shop:app:{s}", word_password("pgpass"))
add("tfvars-password", 'db_password = "{s}"', word_password("tfv"))
add("helm-values-password", "postgresql:\n  auth:\n    password: {s}\n", word_password("hv"))
add("spring-datasource-password", "spring.datasource.password={s}", word_password("spring"))
add("dotnet-connection-string", '"ConnectionStrings": {"Default": "Server=db;Database=shop;'
    'User Id=app;Password={s};"}', word_password("dotnet"))
add("odbc-pwd", "DRIVER={ODBC Driver 18};SERVER=db;UID=app;PWD={s};", word_password("odbc"))
add("toml-password", '[database]\nuser = "app"\npassword = "{s}"\n', word_password("toml"))
add("ini-password", "[mysql]\nuser=app\npassword={s}\n", word_password("ini"))
add("php-define-password", "define('DB_PASSWORD', '{s}');", word_password("php"))
add("wordpress-auth-key", "define( 'AUTH_KEY', '{s}' );",
    fake("wp", 64, ALNUM + "!@#$%^&*()-_[]{}<>~+=,.;:/?|"))
add("yaml-client-secret", "oauth:\n  client_id: web\n  client_secret: {s}\n", fake("ycs", 40))
add("nested-json-mcp-result", json.dumps({"content": [{"type": "text", "text": json.dumps(
    {"apiToken": "{s}", "user": "ci"})}]}), fake("nest", 32))
add("log-json-line", '2026-01-01T00:00:00Z INFO request {"headers": {"x-upstream-token": "{s}"}}',
    fake("logj", 36))
add("python-dict-password", "conn = connect(host='db', user='app', password='{s}')",
    word_password("pyd"))
add("go-const-api-key", 'const apiKey = "{s}"', fake("goc", 32))
add("js-config-secret", "module.exports = { clientSecret: '{s}' }", fake("jsc", 40))
add("java-property-password", 'props.setProperty("mail.smtp.password", "{s}");',
    word_password("javap"))

# -- provider formats, in free text -------------------------------------------------------------
PROVIDERS = {
    "gitlab-deploy-token": "gldt-" + fake("gldt", 20, URLSAFE),
    "gitlab-runner-token": "glrt-" + fake("glrt", 20, URLSAFE),
    "gitlab-feed-token": "glft-" + fake("glft", 20, URLSAFE),
    "slack-app-token": "xapp-1-A" + fake("xapp", 10, UPPER) + "-" + fake("xapp2", 13, DIGITS) +
    "-" + fake("xapp3", 64, HEX),
    "square-access-token": "EAAA" + fake("sqa", 60, URLSAFE),
    "facebook-access-token": "EAAB" + fake("fb", 150),
    "google-refresh-token": "1//0" + fake("grt", 100, URLSAFE),
    "sentry-auth-token": "sntrys_" + fake("sntr", 60, ALNUM),
    "rubygems-api-key": "rubygems_" + fake("rg", 48, HEX),
    "nuget-api-key": "oy2" + fake("ng", 43, LOWER),
    "figma-token": "figd_" + fake("fig", 40, URLSAFE),
    "hubspot-private-app": f"pat-na1-{fake('hs1', 8, HEX)}-{fake('hs2', 4, HEX)}-"
                           f"{fake('hs3', 4, HEX)}-{fake('hs4', 4, HEX)}-{fake('hs5', 12, HEX)}",
    "dynatrace-token": "dt0c01." + fake("dt1", 24, UPPER) + "." + fake("dt2", 64, UPPER),
    "brevo-key": "xkeysib-" + fake("bv", 64, HEX) + "-" + fake("bv2", 16),
    "newrelic-insert-key": "NRII-" + fake("nri", 32, URLSAFE),
    "nvidia-api-key": "nvapi-" + fake("nv", 64, URLSAFE),
    "pinecone-key": "pcsk_" + fake("pc", 60, ALNUM + "_"),
    "tavily-key": "tvly-" + fake("tv", 32),
    "scaleway-access-key": "SCW" + fake("scw", 17, UPPER),
    "bitbucket-app-password": "ATBB" + fake("bb", 32),
    "asana-pat": "2/" + fake("as1", 16, DIGITS) + "/" + fake("as2", 16, DIGITS) + ":" +
    fake("as3", 32, HEX),
    "razorpay-key": "rzp_live_" + fake("rzp", 14),
    "flutterwave-secret": "FLWSECK-" + fake("flw", 32, HEX) + "-X",
    "easypost-key": "EZAK" + fake("ep", 54, HEX),
    "elevenlabs-key": "sk_" + fake("el", 48, HEX),
    "openrouter-key": "sk-or-v1-" + fake("or", 64, HEX),
    "cloudflare-user-token": "cfut_" + fake("cfu", 40),
    "twilio-api-key": "SK" + fake("twk", 32, HEX),
    "azure-ad-client-secret": fake("aad", 3) + "8Q~" + fake("aad2", 34, URLSAFE + "~."),
    "openai-service-account": "sk-svcacct-" + fake("osa", 64, URLSAFE),
    "anthropic-admin-key": "sk-ant-admin01-" + fake("aadm", 93, URLSAFE) + "AA",
    "stripe-restricted-key": "rk_live_" + fake("srk", 99),
    "stripe-webhook-secret": "whsec_" + fake("swh", 32),
    "shopify-shared-secret": "shpss_" + fake("shs", 32, HEX),
    "linear-oauth-token": "lin_oauth_" + fake("lio", 64, HEX),
    "github-refresh-token": "ghr_" + fake("ghr", 76),
    "github-server-token": "ghs_" + fake("ghs2", 36),
    "github-user-token": "ghu_" + fake("ghu", 36),
    "pypi-upload-token": "pypi-AgEIcHlwaS5vcmc" + fake("pyp", 100, URLSAFE),
    "docker-hub-pat": "dckr_pat_" + fake("dhp", 27, URLSAFE),
    "vault-batch-token": "hvb." + fake("hvb", 120, URLSAFE),
    "age-identity": "AGE-SECRET-KEY-1" + fake("agei", 58, UPPER),
    "doppler-service-token": "dp.st.prd." + fake("dps", 40),
    "fly-token": "fm2_" + fake("fly", 60, B64),
    "planetscale-password": "pscale_pw_" + fake("psp", 43, URLSAFE),
    "pulumi-token": "pul-" + fake("pul", 40, HEX),
    "terraform-cloud-token": fake("tfc", 14) + ".atlasv1." + fake("tfc2", 67, URLSAFE),
    "buildkite-token": "bkua_" + fake("bk", 40, HEX),
    "circleci-pat": "CCIPAT_" + fake("cci", 40, ALNUM + "_"),
    "netlify-pat": "nfp_" + fake("nfp", 40),
    "sourcegraph-token": "sgp_" + fake("sgp", 40, HEX),
    "perplexity-key": "pplx-" + fake("ppx", 48),
    "xai-key": "xai-" + fake("xai", 80),
    "groq-key": "gsk_" + fake("gsk", 52),
    "replicate-token": "r8_" + fake("r8", 37),
    "huggingface-org-token": "hf_" + fake("hfo", 34),
    "npm-automation-token": "npm_" + fake("npma", 36),
    "postman-api-key": "PMAK-" + fake("pmk", 24, HEX) + "-" + fake("pmk2", 34, HEX),
    "databricks-pat": "dapi" + fake("dbp", 32, HEX) + "-2",
    "grafana-cloud-token": "glc_" + fake("glc", 60, B64),
    "supabase-service-token": "sbp_" + fake("sbp", 40, HEX),
    "notion-integration-token": "ntn_" + fake("ntn", 46),
    "airtable-pat": "pat" + fake("atp", 14) + "." + fake("atp2", 64, HEX),
    "dropbox-short-lived": "sl." + fake("dbx", 130, URLSAFE),
    "alibaba-access-key": "LTAI" + fake("ltai", 20),
    "tailscale-auth-key": "tskey-auth-k" + fake("ts1", 10) + "CNTRL-" + fake("ts2", 33),
    "digitalocean-oauth": "doo_v1_" + fake("doo", 64, HEX),
    "mapbox-secret-token": "sk.eyJ" + fake("mbx", 60, URLSAFE) + "." + fake("mbx2", 22, URLSAFE),
    "telegram-bot-token": fake("tgb", 10, DIGITS) + ":AA" + fake("tgb2", 33, URLSAFE),
    "discord-bot-token": "MT" + fake("dsb", 24, URLSAFE) + "." + fake("dsb2", 6, URLSAFE) + "." +
    fake("dsb3", 38, URLSAFE),
    "sendgrid-api-key": "SG." + fake("sgk1", 22, URLSAFE) + "." + fake("sgk2", 43, URLSAFE),
    "mailgun-api-key": "key-" + fake("mgk", 32, HEX),
    "google-api-key-free": "AIza" + fake("gak", 35, URLSAFE),
    "google-oauth-secret": "GOCSPX-" + fake("gos", 28, URLSAFE),
    "aws-temporary-key": "ASIA" + fake("asia", 16, UPPER),
    "jwt-in-text": "eyJhbGciOiJIUzI1NiJ9.eyJ" + fake("jwtt", 40, URLSAFE) + "." +
    fake("jwts", 43, URLSAFE),
    "private-key-openssh": "-----BEGIN OPENSSH PRIVATE KEY-----\n" + fake("opk", 70, B64) +
    "\n-----END OPENSSH PRIVATE KEY-----",
}
PHRASES = ["the token {s} was pasted in the chat", "found {s} in the logs",
           "use {s} for the staging run", "rotated: {s}"]
for n, (kind, value) in enumerate(PROVIDERS.items()):
    add(kind, PHRASES[n % len(PHRASES)], value)
