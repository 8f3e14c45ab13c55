//! The Lua scripts that make a check and a write one step in Redis.

/// Keeps the last `ARGV[1]` messages of the list `KEYS[1]` (`max_turns`), then drops the
/// results at its head whose call was dropped: no exchange is left split. The branches
/// (the list `KEYS[2]`, one JSON branch each) that hang off a message that went, or off
/// nothing (versions of the first message), go too, with the branches off theirs; `ARGV[2]`
/// is a marker no branch can equal. Returns how many messages were dropped.
pub(super) const TRIM_WHOLE: &str = r"
local len = redis.call('LLEN', KEYS[1])
local start = len - tonumber(ARGV[1])
if start <= 0 then
    return 0
end
while start < len do
    local ok, m = pcall(cjson.decode, redis.call('LINDEX', KEYS[1], start))
    if not (ok and type(m) == 'table' and m.tool ~= nil and m.tool ~= cjson.null) then
        break
    end
    start = start + 1
end
if redis.call('EXISTS', KEYS[2]) == 1 then
    local gone = {}
    for _, item in ipairs(redis.call('LRANGE', KEYS[1], 0, start - 1)) do
        local ok, m = pcall(cjson.decode, item)
        if ok and type(m) == 'table' and type(m.id) == 'string' then
            gone[m.id] = true
        end
    end
    local branches = redis.call('LRANGE', KEYS[2], 0, -1)
    local removed, more = {}, true
    while more do
        more = false
        for i, item in ipairs(branches) do
            local ok, b = pcall(cjson.decode, item)
            if not removed[i] and ok and type(b) == 'table'
                and (b.parent == nil or b.parent == cjson.null or gone[b.parent]) then
                removed[i], more = true, true
                for _, m in ipairs(type(b.messages) == 'table' and b.messages or {}) do
                    if type(m) == 'table' and type(m.id) == 'string' then
                        gone[m.id] = true
                    end
                end
            end
        end
    end
    for i, _ in pairs(removed) do
        redis.call('LSET', KEYS[2], i - 1, ARGV[2])
    end
    redis.call('LREM', KEYS[2], 0, ARGV[2])
end
redis.call('LTRIM', KEYS[1], start, -1)
return start
";

/// Takes over the lock `KEYS[1]` from `ARGV[1]` (a holder of this process whose reply is
/// over, whose release did not reach Redis): sets `ARGV[2]` for `ARGV[3]` ms if the lock
/// still holds `ARGV[1]`. Returns 1 if it did.
pub(super) const TAKE_OVER: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
end
return 0
";

/// Takes over the lock `KEYS[1]` from `ARGV[1]`, a holder of another process, when that
/// process's heartbeat `KEYS[2]` is gone (it died): sets `ARGV[2]` for `ARGV[3]` ms. Returns
/// 1 if it did, 0 if the holder's process is alive, -1 if the lock changed meanwhile.
pub(super) const TAKE_OVER_ORPHAN: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return -1
end
if redis.call('EXISTS', KEYS[2]) == 1 then
    return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
";

/// Extends the lock `KEYS[1]` to `ARGV[2]` ms if it still holds the token `ARGV[1]`.
pub(super) const RENEW_IF_HELD: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes the lock `KEYS[1]` if it still holds the token `ARGV[1]` (never another's).
pub(super) const RELEASE_IF_HELD: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
";

/// Applies pruning edits to the list `KEYS[1]` in one step. `ARGV[1]` is a marker no message
/// can equal; then, per edit, the index, the `ts`, `text` and number of context blocks of
/// the message the pass read there, and its new JSON (empty: remove it). An edit whose
/// message is no longer the one read is skipped. Returns how many were applied.
pub(super) const PRUNE: &str = r"
local applied, removed = 0, 0
for i = 2, #ARGV, 5 do
    local current = redis.call('LINDEX', KEYS[1], ARGV[i])
    if current then
        local ok, message = pcall(cjson.decode, current)
        if ok and type(message) == 'table' and message.role == 'user'
            and message.ts == tonumber(ARGV[i + 1]) and message.text == ARGV[i + 2]
            and type(message.context) == 'table'
            and #message.context == tonumber(ARGV[i + 3]) then
            if ARGV[i + 4] == '' then
                redis.call('LSET', KEYS[1], ARGV[i], ARGV[1])
                removed = removed + 1
            else
                redis.call('LSET', KEYS[1], ARGV[i], ARGV[i + 4])
            end
            applied = applied + 1
        end
    end
end
if removed > 0 then
    redis.call('LREM', KEYS[1], 0, ARGV[1])
end
return applied
";

/// Rewrites messages in place, each only if it still has the role, time and text the caller
/// read. ARGV: (index, role, ts, text, new) per message; returns how many were rewritten.
pub(super) const REWRITE: &str = r"
local applied = 0
for i = 1, #ARGV, 5 do
    local current = redis.call('LINDEX', KEYS[1], ARGV[i])
    if current then
        local ok, message = pcall(cjson.decode, current)
        if ok and type(message) == 'table' and message.role == ARGV[i + 1]
            and message.ts == tonumber(ARGV[i + 2]) and message.text == ARGV[i + 3] then
            redis.call('LSET', KEYS[1], ARGV[i], ARGV[i + 4])
            applied = applied + 1
        end
    end
end
return applied
";

/// Writes the summary `KEYS[1]` (`ARGV[2]`, expiring in `ARGV[3]` seconds unless empty) and
/// moves the version `KEYS[2]` on, only if the version is still `ARGV[1]`. Returns 1 if it
/// wrote.
pub(super) const PUT_SUMMARY_IF: &str = r"
if (tonumber(redis.call('GET', KEYS[2])) or 0) ~= tonumber(ARGV[1]) then
    return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('INCR', KEYS[2])
if ARGV[3] ~= '' then
    redis.call('EXPIRE', KEYS[1], ARGV[3])
    redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
";

/// Changes the chosen path (the list `KEYS[1]`) and its branches (the list `KEYS[2]`) in one
/// step, and moves the version `KEYS[3]` on, only if the path still holds `ARGV[1]`
/// messages and the last still has the role, time and text `ARGV[2..4]` (no role: the path
/// is empty). Keeps its first `ARGV[5]` messages, adds the `ARGV[6]` messages after
/// `ARGV[7]` (a TTL in seconds, or empty), and the branches after them. Returns 1 if it did.
pub(super) const REBRANCH_IF: &str = r"
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[1]) then
    return 0
end
if ARGV[2] ~= '' then
    local ok, last = pcall(cjson.decode, redis.call('LINDEX', KEYS[1], -1) or '')
    if not ok or type(last) ~= 'table' or last.role ~= ARGV[2]
        or last.ts ~= tonumber(ARGV[3]) or last.text ~= ARGV[4] then
        return 0
    end
end
local keep = tonumber(ARGV[5])
if keep == 0 then
    redis.call('DEL', KEYS[1])
else
    redis.call('LTRIM', KEYS[1], 0, keep - 1)
end
local added = tonumber(ARGV[6])
for i = 8, 7 + added do
    redis.call('RPUSH', KEYS[1], ARGV[i])
end
redis.call('DEL', KEYS[2])
for i = 8 + added, #ARGV do
    redis.call('RPUSH', KEYS[2], ARGV[i])
end
redis.call('INCR', KEYS[3])
if ARGV[7] ~= '' then
    for _, key in ipairs(KEYS) do
        if redis.call('EXISTS', key) == 1 then
            redis.call('EXPIRE', key, ARGV[7])
        end
    end
end
return 1
";
