-- The rows OpenCode wrote for one session (its session, message and part tables),
-- as the real CLI made them in its end-to-end test; the home directory is /home/dev.
CREATE TABLE `session` (
    `id` text PRIMARY KEY,
    `project_id` text NOT NULL,
    `workspace_id` text,
    `parent_id` text,
    `slug` text NOT NULL,
    `directory` text NOT NULL,
    `path` text,
    `title` text NOT NULL,
    `version` text NOT NULL,
    `share_url` text,
    `summary_additions` integer,
    `summary_deletions` integer,
    `summary_files` integer,
    `summary_diffs` text,
    `metadata` text,
    `cost` real DEFAULT 0 NOT NULL,
    `tokens_input` integer DEFAULT 0 NOT NULL,
    `tokens_output` integer DEFAULT 0 NOT NULL,
    `tokens_reasoning` integer DEFAULT 0 NOT NULL,
    `tokens_cache_read` integer DEFAULT 0 NOT NULL,
    `tokens_cache_write` integer DEFAULT 0 NOT NULL,
    `revert` text,
    `permission` text,
    `agent` text,
    `model` text,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `time_compacting` integer,
    `time_archived` integer,
    CONSTRAINT `fk_session_project_id_project_id_fk` FOREIGN KEY (`project_id`) REFERENCES `project`(`id`) ON DELETE CASCADE
  );
INSERT INTO session VALUES ('ses_de02acc4dffeXHco2K0tZdlGsV', 'global', NULL, NULL, 'swift-meadow', '/home/dev/proj', 'home/dev/proj', 'done', '1.18.33', NULL, 0, 0, 0, NULL, NULL, 0.00021, 20, 10, 0, 0, 0, NULL, '[{"permission":"question","pattern":"*","action":"deny"},{"permission":"plan_enter","pattern":"*","action":"deny"},{"permission":"plan_exit","pattern":"*","action":"deny"}]', 'build', '{"id":"claude-sonnet-4-5","providerID":"anthropic","variant":"default"}', 1795830395826, 1795830401852, NULL, NULL);
CREATE TABLE `message` (
    `id` text PRIMARY KEY,
    `session_id` text NOT NULL,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `data` text NOT NULL,
    CONSTRAINT `fk_message_session_id_session_id_fk` FOREIGN KEY (`session_id`) REFERENCES `session`(`id`) ON DELETE CASCADE
  );
INSERT INTO message VALUES ('msg_21fd5343c001lp8tMPOPFcgJy1', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830395964, 1795830402209, '{"role":"user","time":{"created":1795830395964},"agent":"build","model":{"providerID":"anthropic","modelID":"claude-sonnet-4-5"},"summary":{"diffs":[]}}');
INSERT INTO message VALUES ('msg_21fd53c4100182LsRdCqSV6YMx', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830398018, 1795830401585, '{"parentID":"msg_21fd5343c001lp8tMPOPFcgJy1","role":"assistant","mode":"build","agent":"build","path":{"cwd":"/home/dev/proj","root":"/"},"cost":0.000105,"tokens":{"total":15,"input":10,"output":5,"reasoning":0,"cache":{"write":0,"read":0}},"modelID":"claude-sonnet-4-5","providerID":"anthropic","time":{"created":1795830398018,"completed":1795830401583},"finish":"tool-calls"}');
INSERT INTO message VALUES ('msg_21fd54a39001aMgwCwIl4gxJPR', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830401593, 1795830401766, '{"parentID":"msg_21fd5343c001lp8tMPOPFcgJy1","role":"assistant","mode":"build","agent":"build","path":{"cwd":"/home/dev/proj","root":"/"},"cost":0.000105,"tokens":{"total":15,"input":10,"output":5,"reasoning":0,"cache":{"write":0,"read":0}},"modelID":"claude-sonnet-4-5","providerID":"anthropic","time":{"created":1795830401593,"completed":1795830401764},"finish":"stop"}');
CREATE TABLE `part` (
    `id` text PRIMARY KEY,
    `message_id` text NOT NULL,
    `session_id` text NOT NULL,
    `time_created` integer NOT NULL,
    `time_updated` integer NOT NULL,
    `data` text NOT NULL,
    CONSTRAINT `fk_part_message_id_message_id_fk` FOREIGN KEY (`message_id`) REFERENCES `message`(`id`) ON DELETE CASCADE
  );
INSERT INTO part VALUES ('prt_21fd534560012fdbr7SosjHY7O', 'msg_21fd5343c001lp8tMPOPFcgJy1', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830397976, 1795830397982, '{"type":"text","text":"Say hello with a shell command"}');
INSERT INTO part VALUES ('prt_21fd54880001nzy1XbQOIQdr7E', 'msg_21fd53c4100182LsRdCqSV6YMx', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830401153, 1795830401161, '{"type":"step-start"}');
INSERT INTO part VALUES ('prt_21fd54891001vYcKBhftlxsH9q', 'msg_21fd53c4100182LsRdCqSV6YMx', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830401169, 1795830401558, '{"type":"tool","tool":"bash","callID":"toolu_01","state":{"status":"completed","input":{"command":"echo hello","description":"Say hello"},"output":"hello\n","metadata":{"output":"hello\n","exit":0,"truncated":false},"title":"echo hello","time":{"start":1795830401218,"end":1795830401555}}}');
INSERT INTO part VALUES ('prt_21fd54a1e0019kZOIRTRT4ZzBg', 'msg_21fd53c4100182LsRdCqSV6YMx', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830401566, 1795830401570, '{"reason":"tool-calls","type":"step-finish","tokens":{"total":15,"input":10,"output":5,"reasoning":0,"cache":{"write":0,"read":0}},"cost":0.000105}');
INSERT INTO part VALUES ('prt_21fd54ac8001n2jhWqupeuHq6d', 'msg_21fd54a39001aMgwCwIl4gxJPR', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830401736, 1795830401739, '{"type":"step-start"}');
INSERT INTO part VALUES ('prt_21fd54ace001gq8S0BG2HyAxk0', 'msg_21fd54a39001aMgwCwIl4gxJPR', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830401742, 1795830401750, '{"type":"text","text":"done","time":{"start":1795830401742,"end":1795830401748}}');
INSERT INTO part VALUES ('prt_21fd54ada0014icMjVJSh26IRM', 'msg_21fd54a39001aMgwCwIl4gxJPR', 'ses_de02acc4dffeXHco2K0tZdlGsV', 1795830401754, 1795830401756, '{"reason":"stop","type":"step-finish","tokens":{"total":15,"input":10,"output":5,"reasoning":0,"cache":{"write":0,"read":0}},"cost":0.000105}');
