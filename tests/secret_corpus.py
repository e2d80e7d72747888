"""Realistic secrets (fake values in the real formats) and ``<private>`` as people type it.

``SECRETS``: (kind, text as an engineer would paste it, the secret in it). Each value
is made from a hash of its name, so no two are alike and none is a real credential.
``PRIVATE``: (name, text) where the word ``HIDDEN…`` must not survive.
"""

from __future__ import annotations

import hashlib

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
LOWER = "abcdefghijklmnopqrstuvwxyz0123456789"
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def fake(name: str, length: int, alphabet: str = ALNUM) -> str:
    """length characters of alphabet, fixed by name."""
    out, counter = [], 0
    while len(out) < length:
        digest = hashlib.sha256(f"{name}:{counter}".encode()).digest()
        out += [alphabet[b % len(alphabet)] for b in digest]
        counter += 1
    return "".join(out[:length])


def _pem(kind: str, name: str) -> tuple[str, str]:
    body = "\n".join(fake(f"{name}{i}", 64, B64) for i in range(4))
    return (f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----", body.splitlines()[1])


SECRETS: list[tuple[str, str, str]] = []


def add(kind: str, template: str, secret: str) -> None:
    SECRETS.append((kind, template.format(s=secret), secret))


# Cloud providers
for i, context in enumerate(["aws_access_key_id = {s}", "export AWS_ACCESS_KEY_ID={s}",
                             "the key {s} was rotated", '{{"AccessKeyId": "{s}"}}']):
    add("aws-access-key", context, "AKIA" + fake(f"aws{i}", 16, UPPER))
for i, context in enumerate(["aws_secret_access_key = {s}", "AWS_SECRET_ACCESS_KEY={s}",
                             '{{"SecretAccessKey": "{s}"}}']):
    add("aws-secret-key", context, fake(f"awss{i}", 40, B64))
add("azure-storage", "DefaultEndpointsProtocol=https;AccountName=prodlogs;AccountKey={s};"
    "EndpointSuffix=core.windows.net", fake("az1", 86, B64) + "==")
add("azure-storage", 'conn = "AccountName=x;AccountKey={s}"', fake("az2", 86, B64) + "==")
add("azure-sas", "Endpoint=sb://bus.servicebus.windows.net/;SharedAccessKeyName=root;"
    "SharedAccessKey={s}", fake("sas1", 43, B64) + "=")
add("azure-sas", "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig={s}&se=2026",
    fake("sas2", 44, ALNUM) + "%3D")
add("google-api-key", "GOOGLE_MAPS_KEY={s}", "AIza" + fake("gk1", 35, URLSAFE))
add("google-api-key", "fetch(`https://maps.googleapis.com/api?key={s}`)",
    "AIza" + fake("gk2", 35, URLSAFE))
add("google-oauth", 'client_secret: "{s}"', "GOCSPX-" + fake("goc", 28, URLSAFE))
add("google-oauth", "curl -H 'Authorization: Bearer {s}' https://www.googleapis.com",
    "ya29." + fake("ya29", 60, URLSAFE))
add("gcp-service-account", '{{"type": "service_account", "private_key": "{s}"}}',
    "-----BEGIN PRIVATE KEY-----\\n" + fake("gcp", 64, B64) + "\\n-----END PRIVATE KEY-----\\n")
add("digitalocean", "doctl auth init -t {s}", "dop_v1_" + fake("do1", 64, HEX))
add("alibaba", "ALIBABA_CLOUD_ACCESS_KEY_ID={s}", "LTAI" + fake("ali", 20))
add("ibm-cloud", 'ibm_cloud_api_key = "{s}"', fake("ibm", 44, URLSAFE))

# Source hosting and packages
for i, context in enumerate(["git clone https://{s}@github.com/acme/app.git",
                             "GITHUB_TOKEN={s} gh pr list", "token: {s}",
                             "Authorization: token {s}"]):
    add("github-token", context, "ghp_" + fake(f"gh{i}", 36))
add("github-token", "gh auth login --with-token <<< {s}", "github_pat_" + fake("ghf", 22)
    + "_" + fake("ghf2", 59))
add("github-token", "GH_TOKEN={s}", "gho_" + fake("gho", 36))
add("gitlab-token", "git remote add origin https://oauth2:{s}@gitlab.com/a/b.git",
    "glpat-" + fake("gl1", 20, URLSAFE))
add("gitlab-token", "CI_JOB_TOKEN is not {s}", "glpat-" + fake("gl2", 20, URLSAFE))
add("npm-token", "//registry.npmjs.org/:_authToken={s}", "npm_" + fake("npm1", 36))
add("npm-token", "NPM_TOKEN={s} npm publish", "npm_" + fake("npm2", 36))
add("pypi-token", "twine upload -p {s} dist/*", "pypi-AgEIcHlwaS5vcmc" + fake("pypi", 72, URLSAFE))
add("docker-token", "echo {s} | docker login -u acme --password-stdin",
    "dckr_pat_" + fake("dck", 27, URLSAFE))
add("artifactory", 'ARTIFACTORY_API_KEY="{s}"', "AKC" + fake("art", 70))

# AI and SaaS APIs
for i, context in enumerate(["OPENAI_API_KEY={s}", 'client = OpenAI(api_key="{s}")',
                             'curl https://api.openai.com/v1 -H "Authorization: Bearer {s}"']):
    add("openai-key", context, "sk-proj-" + fake(f"oa{i}", 48, URLSAFE))
add("openai-key", "export OPENAI_KEY={s}",
    "sk-" + fake("oa-old", 20) + "T3BlbkFJ" + fake("oa-o2", 20))
for i, context in enumerate(["ANTHROPIC_API_KEY={s}", "x-api-key: {s}",
                             "anthropic.Anthropic(api_key='{s}')"]):
    add("anthropic-key", context, "sk-ant-api03-" + fake(f"an{i}", 93, URLSAFE) + "AA")
for i, context in enumerate(["HF_TOKEN={s}", "huggingface-cli login --token {s}",
                             "from_pretrained(repo, token=\"{s}\")"]):
    add("huggingface-token", context, "hf_" + fake(f"hf{i}", 34))
add("stripe-key", "STRIPE_SECRET_KEY={s}", "sk_live_" + fake("st1", 24))
add("stripe-key", "stripe.api_key = '{s}'", "sk_test_" + fake("st2", 24))
add("stripe-key", "restricted key {s}", "rk_live_" + fake("st3", 24))
add("sendgrid-key", "SENDGRID_API_KEY={s}", "SG." + fake("sg1", 22, URLSAFE) + "."
    + fake("sg2", 43, URLSAFE))
add("sendgrid-key", "sg = SendGridAPIClient('{s}')", "SG." + fake("sg3", 22, URLSAFE) + "."
    + fake("sg4", 43, URLSAFE))
add("twilio-key", "TWILIO_API_KEY={s}", "SK" + fake("tw1", 32, HEX))
add("twilio-key", "account {s}", "AC" + fake("tw2", 32, HEX))
add("mailchimp-key", "mailchimp key {s}", fake("mc", 32, HEX) + "-us21")
add("mailgun-key", "MAILGUN_KEY: {s}", "key-" + fake("mg", 32, HEX))
add("square-secret", "SQUARE_SECRET={s}", "sq0csp-" + fake("sq", 43, URLSAFE))
add("shopify-token", "X-Shopify-Access-Token: {s}", "shpat_" + fake("shp", 32, HEX))
add("databricks-token", "databricks configure --token {s}", "dapi" + fake("dbx", 32, HEX))
add("atlassian-token", "JIRA_API_TOKEN={s}", "ATATT3" + fake("atl", 180, URLSAFE))
add("linear-key", "linear key {s}", "lin_api_" + fake("lin", 40))
add("postman-key", "postman login --with-api-key {s}", "PMAK-" + fake("pm1", 24, HEX) + "-"
    + fake("pm2", 34, HEX))
add("newrelic-key", "NEW_RELIC_API_KEY={s}", "NRAK-" + fake("nr", 27, UPPER))
add("supabase-token", "supabase login --token {s}", "sbp_" + fake("sb", 40, HEX))
add("grafana-token", "GRAFANA_SA={s}", "glsa_" + fake("gf", 32) + "_" + fake("gf2", 8, HEX))
add("vault-token", "VAULT_TOKEN={s} vault kv get secret/db", "hvs." + fake("hv", 90, URLSAFE))
add("sentry-dsn", 'sentry_sdk.init("https://{s}@o450.ingest.sentry.io/12")', fake("sen", 32, HEX))
add("age-key", "# created: 2026-01-01\n{s}", "AGE-SECRET-KEY-1" + fake("age", 58, UPPER))

# Chat tools and webhooks
for i, context in enumerate(["SLACK_BOT_TOKEN={s}", "client = WebClient(token='{s}')"]):
    add("slack-token", context, "xoxb-" + fake(f"sl{i}", 12, "0123456789") + "-"
        + fake(f"sl{i}b", 13, "0123456789") + "-" + fake(f"sl{i}c", 24))
add("slack-token", "user token {s}", "xoxp-" + fake("slp", 40, LOWER))
add("slack-webhook", "curl -X POST {s} -d '{{\"text\":\"hi\"}}'",
    "https://hooks.slack.com/services/T" + fake("sw1", 8, UPPER) + "/B" + fake("sw2", 10, UPPER)
    + "/" + fake("sw3", 24))
add("slack-webhook", 'SLACK_WEBHOOK_URL="{s}"', "https://hooks.slack.com/services/T"
    + fake("sw4", 8, UPPER) + "/B" + fake("sw5", 10, UPPER) + "/" + fake("sw6", 24))
add("discord-webhook", "webhook = '{s}'", "https://discord.com/api/webhooks/"
    + fake("dw1", 18, "0123456789") + "/" + fake("dw2", 68, URLSAFE))
add("discord-token", "DISCORD_TOKEN={s}", "MT" + fake("dt1", 24, URLSAFE) + "."
    + fake("dt2", 6, URLSAFE) + "." + fake("dt3", 27, URLSAFE))
add("discord-token", "bot.run('{s}')", "OD" + fake("dt4", 23, URLSAFE) + "."
    + fake("dt5", 6, URLSAFE) + "." + fake("dt6", 27, URLSAFE))
add("telegram-token", "TELEGRAM_BOT_TOKEN={s}", "54" + fake("tg1", 8, "0123456789") + ":"
    + fake("tg2", 35, URLSAFE))
add("teams-webhook", "post to {s}", "https://acme.webhook.office.com/webhookb2/"
    + fake("tm1", 36, LOWER) + "@" + fake("tm2", 36, LOWER) + "/IncomingWebhook/" + fake("tm3", 32))

# Tokens in general
for i, context in enumerate(["Authorization: Bearer {s}", "jwt: {s}",
                             'headers = {{"Authorization": "Bearer {s}"}}']):
    add("jwt", context, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOi" + fake(f"jw{i}", 30, URLSAFE) + "."
        + fake(f"jws{i}", 43, URLSAFE))
add("authorization-basic", "Authorization: Basic {s}", fake("basic", 28, B64) + "==")
add("authorization-bearer", "curl -H 'Authorization: Bearer {s}' localhost",
    fake("bear", 40, URLSAFE))
add("authorization-bearer", "proxy-authorization: {s}", fake("bear2", 32, URLSAFE))
add("url-token", "GET /api/export?access_token={s}&page=2", fake("ut1", 40, URLSAFE))
add("url-token", "https://api.example.com/v1/items?api_key={s}", fake("ut2", 32, HEX))

# Passwords in URLs, command lines and connection strings
for i, (scheme, context) in enumerate([
        ("postgres", "DATABASE_URL=postgres://app:{s}@db.internal:5432/app"),
        ("postgresql", "psql 'postgresql://admin:{s}@10.0.0.5/prod'"),
        ("mysql", 'engine = create_engine("mysql+pymysql://root:{s}@localhost/shop")'),
        ("mongodb", "mongosh \"mongodb+srv://svc:{s}@cluster0.abcde.mongodb.net/db\""),
        ("redis", "REDIS_URL=redis://:{s}@cache:6379/0"),
        ("redis", "rediss://default:{s}@eu1.upstash.io:6379"),
        ("amqp", "BROKER=amqp://guest:{s}@rabbit:5672//"),
        ("ftp", "ftp://deploy:{s}@files.example.com/upload"),
        ("https", "pip install --index-url https://ci:{s}@pypi.acme.dev/simple pkg")]):
    add(f"url-password-{scheme}", context, fake(f"urlpw{i}", 16, ALNUM + "!*"))
for i, context in enumerate(["curl -u admin:{s} https://api.example.com",
                             "curl --user deploy:{s} -X POST http://ci/job",
                             "http -a me:{s} GET https://httpbin.org/basic-auth"]):
    add("curl-user", context, fake(f"curlu{i}", 14, ALNUM + "!#"))
for i, context in enumerate(["mysql -u root -p{s} shop",
                             "mariadb -h db -u app -p{s} -e 'select 1'",
                             "mysqldump -uadmin -p'{s}' prod > dump.sql"]):
    add("mysql-password", context, fake(f"myp{i}", 12, ALNUM + "!%"))
add("cli-password", "psql --password={s} -h db", fake("clip1", 14))
add("cli-password", "sshpass -p {s} ssh deploy@host", fake("clip2", 14))
add("cli-password", "redis-cli -h cache -a {s} ping", fake("clip3", 20))
add("cli-password", "docker login -u ci -p {s} registry.acme.dev", fake("clip4", 20))
add("cli-password", "vault login -method=userpass username=me password={s}", fake("clip5", 14))
add("connection-string", "Server=tcp:sql.acme.net,1433;Database=app;User ID=sa;Password={s};",
    fake("cs1", 16, ALNUM + "!@#"))
add("connection-string", "Data Source=db;Initial Catalog=x;uid=app;pwd={s}", fake("cs2", 14))

# Keyed assignments: .env files, JSON, YAML, code
for i, key in enumerate(["DB_PASSWORD", "SECRET_KEY", "API_KEY", "JWT_SECRET", "SESSION_SECRET",
                         "POSTGRES_PASSWORD", "MYSQL_ROOT_PASSWORD", "CLIENT_SECRET", "AUTH_TOKEN",
                         "ENCRYPTION_KEY", "PRIVATE_KEY_PASSPHRASE"]):
    add(f"dotenv-{key.lower()}", f"{key}={{s}}", fake(f"env{i}", 24, ALNUM + "-_."))
add("dotenv-quoted", 'export DJANGO_SECRET_KEY="{s}"', fake("envq", 50, ALNUM + "!@#%^&*(-_=+)"))
for i, context in enumerate(['{{"password": "{s}"}}', '{{"user": "svc", "passwd": "{s}"}}',
                             '{{"db": {{"host": "x", "Password": "{s}"}}}}',
                             '{{"client_secret":"{s}"}}', '{{"apiKey": "{s}"}}']):
    add("json-field", context, fake(f"json{i}", 18, ALNUM + "!@"))
for i, context in enumerate(["password: {s}", "  secret: '{s}'", "token: \"{s}\""]):
    add("yaml-field", context, fake(f"yaml{i}", 20))
for i, context in enumerate(['password = "{s}"', "const apiKey = '{s}';",
                             'DB_PASS := "{s}"', "conn.login(user, password='{s}')",
                             'secret_key => "{s}"']):
    add("code-literal", context, fake(f"code{i}", 16, ALNUM + "!$"))

# Key files
for i, kind in enumerate(["RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY",
                          "PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "DSA PRIVATE KEY",
                          "PGP PRIVATE KEY BLOCK"]):
    block, inner = _pem(kind, f"pem{i}")
    SECRETS.append(("private-key", f"cat ~/.ssh/id\n{block}\n", inner))
cut, cut_inner = _pem("OPENSSH PRIVATE KEY", "pemcut")
SECRETS.append(("private-key-cut-off", cut.rsplit("\n", 2)[0], cut_inner))
putty = fake("putty", 64, B64)
SECRETS.append(("putty-key", "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPrivate-Lines: 1\n"
                f"{putty}\nPrivate-MAC: {fake('mac', 40, HEX)}", putty))

# What engineers paste from their own machines' files and tools
add("netrc", "machine api.heroku.com\n  login me@acme.dev\n  password {s}", fake("netrc1", 36,
                                                                                   LOWER))
add("netrc", "machine github.com login ci password {s}", fake("netrc2", 20))
add("docker-config", '{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{s}"}}}}}}',
    fake("dockauth", 32, B64) + "==")
add("npmrc-auth", "_auth={s}", fake("npmauth", 40, B64) + "=")
add("twilio-auth-token", 'client = Client("AC{ac}", "{{s}}")'.format(ac=fake("twac", 32, HEX)),
    fake("twtok", 32, HEX))
add("twilio-auth-token", "TWILIO_AUTH_TOKEN={s}", fake("twtok2", 32, HEX))
add("stripe-webhook-secret", "Ready! Your webhook signing secret is {s} (^C to quit)",
    "whsec_" + fake("whsec1", 32))
add("stripe-webhook-secret", "stripe.Webhook.construct_event(payload, sig, '{s}')",
    "whsec_" + fake("whsec2", 32))
add("gmail-app-password", 'EMAIL_HOST_PASSWORD = "{s}"', " ".join(
    fake(f"gm{i}", 4, "abcdefghijklmnopqrstuvwxyz") for i in range(4)))
add("gmail-app-password", "gmail app password: {s}",
    fake("gmail2", 16, "abcdefghijklmnopqrstuvwxyz"))
add("azure-client-secret", "az login --service-principal -u 8f2c-app -p {s} --tenant acme",
    fake("azcs1", 3) + "8Q~" + fake("azcs1b", 34, URLSAFE + "."))
add("azure-client-secret", '"clientSecret": "{s}"', fake("azcs2", 3) + "7Q~"
    + fake("azcs2b", 34, URLSAFE + "."))
add("java-keystore", "keytool -importkeystore -srckeystore a.p12 -srcstorepass {s}"
    " -deststorepass changeit", fake("jks1", 14))
add("java-keystore", "storePassword={s}", fake("jks2", 12))
add("java-keystore", "java -Djavax.net.ssl.keyStorePassword={s} -jar app.jar", fake("jks3", 12))
add("json-key-plain-word", '{{"settings": {{"db": {{"password": "{s}"}}}}}}',
    "correcthorsebattery")
add("json-key-short", '{{"pwd": "{s}"}}', fake("jshort", 5, LOWER))
add("gcp-private-key-id", '{{"type": "service_account", "private_key_id": "{s}"}}',
    fake("gcpkid", 40, HEX))
add("pgpass", "db.internal:5432:app:deploy:{s}", fake("pgpass", 18))
add("cookie", "curl -H 'Cookie: sessionid={s}; csrftoken=abc' https://app", fake("cook", 32, LOWER))
add("mapbox-token", "MAPBOX={s}", "sk.eyJ1Ijoi" + fake("mb1", 40, URLSAFE) + "."
    + fake("mb2", 22, URLSAFE))
add("okta-token", "Authorization: SSWS {s}", "00" + fake("okta", 40, URLSAFE))
add("tailscale-key", "tailscale up --authkey {s}", "tskey-auth-" + fake("ts1", 16) + "-"
    + fake("ts2", 32))
add("groq-key", "groq key {s}", "gsk_" + fake("groq", 52))
add("replicate-token", "replicate token {s}", "r8_" + fake("rep", 37))
add("notion-token", "notion token {s}", "ntn_" + fake("ntn", 46))
add("pulumi-token", "pulumi login with {s}", "pul-" + fake("pul", 40, HEX))
add("planetscale-token", "pscale token {s}", "pscale_tkn_" + fake("ps", 43, URLSAFE))
add("doppler-token", "doppler token {s}", "dp.st.prd." + fake("dop", 40))
add("terraform-cloud-token", "tfe token {s}", fake("tfc1", 14) + ".atlasv1." + fake("tfc2", 67))
add("buildkite-token", "buildkite {s}", "bkua_" + fake("bk", 40, HEX))
add("heroku-key", "heroku token {s}", "HRKU-" + fake("hrku", 60, URLSAFE))
add("1password-token", "OP_SERVICE_ACCOUNT {s}", "ops_eyJ" + fake("ops", 60, URLSAFE))

# Secrets known by their shape in context, not by a provider's prefix: a flag, a key of a
# .env file or a structured value, a header, URL userinfo, a JSON text inside a string.
add("gpg-passphrase", "gpg --batch --passphrase {s} --symmetric notes.txt",
    "Qw3rty!" + fake("gpg", 8))
add("ssh-keygen-passphrase", "ssh-keygen -t rsa -b 4096 -N {s} -f id_deploy", fake("skg", 14))
add("sqlcmd-password", "sqlcmd -S tcp:db,1433 -U sa -P {s}", "Sa!" + fake("sqlc", 12))
add("zip-password", "zip -e -P {s} backup.zip db.sql", fake("zipp", 12))
add("kubernetes-secret", "kind: Secret\napiVersion: v1\nmetadata:\n  name: db\ndata:\n"
    "  token: {s}\n", fake("k8sd", 40, B64) + "==")
add("jwk-private", '{{"kty": "RSA", "e": "AQAB", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWF", '
    '"d": "{s}"}}', fake("jwk", 86, URLSAFE))
add("maven-password", "<server>\n  <id>releases</id>\n  <password>{s}</password>\n</server>",
    fake("mvnp", 18))
add("nuget-password", '<add key="ClearTextPassword" value="{s}" />', fake("nugp", 16))
add("laravel-app-key", "APP_KEY=base64:{s}", fake("applk", 43, B64) + "=")
add("rails-master-key", "RAILS_MASTER_KEY={s}", fake("rmkey", 32, HEX))
add("db-pw", "DB_PW={s}", fake("dbpw", 14))
add("url-password-at-hash", "mysql://app:{s}@db.internal/shop", "pa@s#" + fake("upat", 9))
add("presigned-url", "https://b.s3.amazonaws.com/f.zip?X-Amz-Expires=60&X-Amz-Signature={s}",
    fake("psig", 64, HEX))
add("nested-json", '{{"result": "{{\\"db\\": {{\\"passwd\\": \\"{s}\\"}}}}"}}',
    fake("nestj", 20))

KINDS = sorted({kind.split("-")[0] if kind.startswith(("url-password", "dotenv")) else kind
                for kind, _, _ in SECRETS})

PRIVATE: list[tuple[str, str]] = [
    ("plain", "keep <private>HIDDEN01</private> this"),
    ("upper", "<PRIVATE>HIDDEN02</PRIVATE>"),
    ("mixed", "<Private>HIDDEN03</pRiVaTe> after"),
    ("spaces", "< private >HIDDEN04</ private >"),
    ("spaces-closing", "<private>HIDDEN05< /private > after"),
    ("tab-newline", "<\tprivate\n>HIDDEN06</private\t>"),
    ("multiline", "start <private>\nline HIDDEN07\nline two\n</private> end"),
    ("nested", "<private>a <private>b</private> HIDDEN08</private> after"),
    ("unclosed", "all after this <private> HIDDEN09 and more"),
    ("html", "&lt;private&gt;HIDDEN10&lt;/private&gt; ok"),
    ("html-upper", "&LT;PRIVATE&GT;HIDDEN11&LT;/PRIVATE&GT;"),
    ("html-numeric", "&#60;private&#62;HIDDEN12&#60;/private&#62;"),
    ("json-escaped", "\\u003cprivate\\u003eHIDDEN13\\u003c/private\\u003e"),
    ("url-encoded", "q=%3Cprivate%3EHIDDEN14%3C%2Fprivate%3E"),
    ("attribute", '<private reason="pii">HIDDEN15</private>'),
    ("two-spans", "<private>HIDDEN16</private> and <private>HIDDEN17</private>"),
    ("in-code", "```\nconfig = load()  # <private>HIDDEN18</private>\n```"),
    ("html-spaces", "&lt; private &gt;HIDDEN19&lt; /private &gt;"),
    ("stray-close-first", "</private> then <private>HIDDEN20</private>"),
    ("around-secret-word", "<private>password HIDDEN21</private>"),
]
