"""An in-memory Redis subset with a virtual clock, running the library's Lua text via lupa.

Only what the library's scripts and drivers send is here: strings with PX expiry, lists,
sorted sets, TIME, PUBLISH (returning subscriber counts), PUBSUB NUMSUB, EVAL/EVALSHA with a
script cache that a restart empties, and a few plain commands the tests use. Semantics follow
Redis 7 (RESP2): lazy expiry (a key is gone once the clock is *past* its expiry), empty lists
and sorted sets vanish with their expiry, ``SET`` clears an expiry unless it sets one.

Scripts run in Lua 5.1 (Redis's version) with Redis's conversion rules: a reply becomes a Lua
value (nil -> false, status -> {ok=...}, error -> {err=...}, array -> table), a script's
result becomes a reply (numbers truncated to integers, false -> nil, true -> 1, a table to an
array up to its first nil, {err=...} and {ok=...} to error and status replies). Arguments that
are Lua numbers are formatted as Redis 7.0 does (``%.17g``). ``tests/simulation/
test_differential.py`` keeps all this honest against a real redis-server.

Replies are what a raw RESP2 reader returns (redis-py's parser without response callbacks,
as the production drivers' direct path reads them): ``bytes`` for bulk strings and status
replies, ``int``, ``None``, ``list``; errors are :class:`Error` values (never raised here:
the caller decides what the client would raise).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

from lupa import lua51

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
SYNTAX = "ERR syntax error"
NON_LOCAL = "ERR Script attempted to access a non local key in a cluster node"


class Error:
    """An error reply."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    @property
    def code(self) -> str:
        return self.message.split(" ", 1)[0]

    def __repr__(self) -> str:
        return f"Error({self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Error) and other.message == self.message

    def __hash__(self) -> int:
        return hash(self.message)


class Status:
    """A status reply (``+OK``); given to clients as bytes, to Lua as {ok=...}."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Status({self.text!r})"


OK = Status("OK")


class CommandError(Exception):
    """Raised inside a command implementation; becomes an error reply."""


def _int(value: str) -> int:
    try:
        text = value if isinstance(value, str) else str(value)
        if text != text.strip() or not text:
            raise ValueError
        return int(text)
    except ValueError:
        raise CommandError(NOT_INTEGER) from None


def _float(value: str) -> float:
    text = value.lower()
    if text in ("inf", "+inf"):
        return math.inf
    if text == "-inf":
        return -math.inf
    try:
        result = float(text)
    except ValueError:
        raise CommandError(NOT_FLOAT) from None
    if math.isnan(result):
        raise CommandError(NOT_FLOAT)
    return result


def format_double(value: float) -> str:
    """A double as Redis 7.0 prints it (``%.17g``; ``inf``/``-inf``)."""
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return f"{value:.17g}"


def _bound(text: str) -> tuple[float, bool]:
    """A ZCOUNT/ZREMRANGEBYSCORE bound: (value, exclusive)."""
    if text.startswith("("):
        return _float(text[1:]), True
    return _float(text), False


def _in_range(score: float, low: tuple[float, bool], high: tuple[float, bool]) -> bool:
    lo, lo_ex = low
    hi, hi_ex = high
    if score < lo or (lo_ex and score == lo):
        return False
    return not (score > hi or (hi_ex and score == hi))


# -- the Lua side ---------------------------------------------------------------------------

_LUA_BRIDGE = r"""
local py_call, py_sha1, py_log = ...
local FLAT, NULL = '\0sim-flat-reply\0', '\0sim-nil\0'  -- no script returns these
local base = {
  string = string, math = math, table = table, tonumber = tonumber, tostring = tostring,
  type = type, pairs = pairs, ipairs = ipairs, unpack = unpack, select = select,
  error = error, pcall = pcall, assert = assert, next = next, rawget = rawget,
  rawset = rawset, rawequal = rawequal, setmetatable = setmetatable,
  getmetatable = getmetatable, _VERSION = _VERSION,
}
local function to_lua(kind, a, ...)
  if kind == 1 then return a end
  if kind == 0 then return false end
  if kind == 2 then
    local t = {...}
    for i = 1, a do
      if t[i] == nil then t[i] = false end
    end
    return t
  end
  if kind == 3 then return {ok = a} end
  return {err = a}
end
local redis = {}
redis.call = function(...)
  local result = to_lua(py_call(...))
  if type(result) == 'table' and result.err then
    error(result, 0)
  end
  return result
end
redis.pcall = function(...)
  return to_lua(py_call(...))
end
redis.error_reply = function(msg) return {err = msg} end
redis.status_reply = function(msg) return {ok = msg} end
redis.sha1hex = function(s) return py_sha1(s) end
redis.log = function(level, msg) py_log(level, msg) end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REDIS_VERSION, redis.REDIS_VERSION_NUM = '7.0.0', 0x070000  -- the commands modelled here
base.redis = redis

local function compile(source)
  local f, err = loadstring(source, '@user_script')
  if not f then
    return nil, err
  end
  local env = {}
  setmetatable(env, {
    __index = function(_, name)
      local v = base[name]
      if v == nil then
        error('Script attempted to access nonexistent global variable \'' ..
              tostring(name) .. '\'', 2)
      end
      return v
    end,
    __newindex = function(_, name)
      error('Attempt to modify a readonly table', 2)
    end,
  })
  setfenv(f, env)
  return {f, env}
end

local function run(compiled, nkeys, ...)
  local f, env = compiled[1], compiled[2]
  local args = {...}
  local n = select('#', ...)
  local keys, argv = {}, {}
  for i = 1, nkeys do keys[i] = args[i] end
  for i = nkeys + 1, n do argv[i - nkeys] = args[i] end
  rawset(env, 'KEYS', keys)
  rawset(env, 'ARGV', argv)
  local ok, result = pcall(f)
  if not ok then
    if type(result) == 'table' and type(result.err) == 'string' then
      return {err = result.err}
    end
    return {err = 'ERR ' .. tostring(result)}
  end
  -- The common reply, a flat array of numbers and strings, goes back as values ('flat',
  -- then the items: false as nil, as Redis replies), the rest as the value itself.
  if type(result) ~= 'table' or result.err ~= nil or result.ok ~= nil then
    return result
  end
  local flat = {}
  local i = 1
  while true do
    local item = result[i]
    local t = type(item)
    if item == nil then
      break
    elseif t == 'number' or t == 'string' then
      flat[i] = item
    elseif t == 'boolean' then
      flat[i] = item and 1 or NULL
    else
      return result
    end
    i = i + 1
  end
  return FLAT, i - 1, unpack(flat, 1, i - 1)
end
return compile, run, FLAT, NULL
"""


class Lua:
    """One Lua 5.1 runtime with Redis's ``redis`` table, calling back into a store."""

    def __init__(self) -> None:
        self.runtime = lua51.LuaRuntime(unpack_returned_tuples=True, encoding="utf-8")
        self.store: Store | None = None  # the store whose script runs now
        bridge = self.runtime.execute(_LUA_BRIDGE, self._call, _sha1, _log)
        self._compile, self._run, self._flat, self._null = bridge
        self.lua_type = lua51.lua_type
        self.compiled: dict[str, Any] = {}  # script text -> compiled function

    def _call(self, *args: Any) -> tuple[Any, ...]:
        assert self.store is not None
        return self.store._lua_call(args)

    def compile(self, source: str) -> Any:
        result = self._compile(source)
        if isinstance(result, tuple):
            compiled, error = result
            if compiled is None:
                raise CommandError(f"ERR Error compiling script (new function): {error}")
            return compiled
        return result

    def run(self, compiled: Any, nkeys: int, args: list[str]) -> Any:
        result = self._run(compiled, nkeys, *args)
        if type(result) is tuple and result and result[0] == self._flat:
            null = self._null
            return [
                None if item == null else int(item) if type(item) is float else item
                for item in result[2 : 2 + result[1]]
            ]
        return self.to_reply(result)

    def to_reply(self, value: Any) -> Any:
        """A script's result as a reply, by Redis's Lua-to-RESP rules."""
        if value is None or value is False:
            return None
        if value is True:
            return 1
        if isinstance(value, (int, float)):
            return int(value)  # truncated toward zero, as Redis's (long long) cast
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, bytes):
            return value
        if self.lua_type(value) == "table":
            err = value["err"]
            if isinstance(err, str):
                return Error(err)
            ok = value["ok"]
            if isinstance(ok, str):
                return Status(ok)
            items = []
            i = 1
            while True:
                item = value[i]
                if item is None:
                    break
                items.append(self.to_reply(item))
                i += 1
            return items
        return None  # functions, userdata: Redis replies nil


_shared: Lua | None = None


def shared_lua() -> Lua:
    """One Lua runtime per Python process, shared by every store (scripts compile once)."""
    global _shared
    if _shared is None:
        _shared = Lua()
    return _shared


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _log(level: int, message: str) -> None:
    pass


def _client_arg(value: Any) -> str:
    """A client's argument as the server receives it."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def _lua_arg(value: Any, lua_doubles: str = "%.17g") -> str:
    """A Lua argument to redis.call as the string the server makes of it: a non-integer
    number through ``lua_doubles`` (Redis 7.0: ``%.17g``; Valkey 9: Lua's own ``%.14g``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        raise CommandError("ERR Lua redis lib command arguments must be strings or integers")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if lua_doubles == "%.17g" or math.isinf(value) or value == int(value):
            return format_double(value)
        return lua_doubles % value
    if isinstance(value, bytes):
        return value.decode()
    raise CommandError("ERR Lua redis lib command arguments must be strings or integers")


def _to_lua(reply: Any) -> tuple[Any, ...]:
    """A command's reply in the bridge's (kind, ...) form."""
    if reply is None:
        return (0,)
    if isinstance(reply, int):
        return (1, reply)
    if isinstance(reply, str):
        return (1, reply)
    if isinstance(reply, Status):
        return (3, reply.text)
    if isinstance(reply, Error):
        return (4, reply.message)
    if isinstance(reply, list):
        for item in reply:
            if isinstance(item, list):
                raise AssertionError("nested arrays are not used by the scripts")
        return (2, len(reply), *reply)
    raise AssertionError(f"unexpected reply {reply!r}")


# -- the store -------------------------------------------------------------------------------

Publish = Callable[[str, str], int]


class Store:
    """The data of one Redis server; ``clock()`` gives its time in microseconds.

    ``publish(channel, message)`` is called for every PUBLISH and returns how many
    subscribers heard it (the world decides: it owns the subscriptions and the network).
    ``transform`` rewrites a script's text before it is compiled (the mutation script's
    hook); the script cache is keyed by the SHA-1 of the text the client sent.
    """

    def __init__(
        self,
        clock: Callable[[], int],
        publish: Publish | None = None,
        numsub: Callable[[str], int] | None = None,
        transform: Callable[[str], str] | None = None,
    ) -> None:
        self.clock = clock
        self.publish_hook = publish
        self.numsub_hook = numsub
        self.transform = transform
        self.data: dict[str, Any] = {}
        self.types: dict[str, str] = {}
        self.expires: dict[str, int] = {}  # key -> expiry in server ms
        self.scripts: dict[str, Any] = {}  # sha -> compiled
        self.channels: dict[str, int] = {}  # channel -> subscribers (when no hook)
        self.lua = shared_lua()
        self.script_depth = 0
        self.on_command: Callable[[tuple[str, ...]], None] | None = None
        # When a list: (key, member, live members after) for each member a ZADD adds, in
        # order (the simulator checks each admission against its caller's own limit).
        self.admissions: list[tuple[str, str, int]] | None = None
        self._now_ms = 0
        # How a script's non-integer Lua number becomes a command argument: Redis 7.0's
        # "%.17g" (what the simulator models); test_differential sets Valkey's "%.14g" when
        # it compares with a Valkey server. Our scripts pass integers only.
        self.lua_doubles = "%.17g"
        self.version = 0  # changes with every command (caches of what the store holds)
        # A Redis Cluster node whose slot is being migrated (MIGRATING, no key moved yet)
        # runs a script only if every key it names is there, and then refuses the script's
        # command on any of those keys once it is gone -- deleted, or emptied (an emptied
        # sorted set is deleted) by the script itself: "non local key", since the key may be
        # on the new node. The script stops there, its earlier writes kept (review 35, 06).
        # ``migrating``: every script that finds all its keys runs so (the others as on a
        # stable slot: a migrating one would have refused them whole).
        self.migrating = False
        self._moving: frozenset[str] | None = None  # the running script's keys, so run
        self.refused_writes = 0  # by the last command (a script): writes a migration refused
        self.refused_reads = 0  # ... and reads (and writes changing nothing) it refused
        self._commands = {name: getattr(self, method) for name, method in _COMMANDS.items()}
        # What a script may call, by the name as the scripts spell it (upper case) too.
        self._in_scripts = {
            name: handler for name, handler in self._commands.items() if name not in _NOT_IN_SCRIPTS
        }

    # -- time and keys ------------------------------------------------------------------

    def now_ms(self) -> int:
        return self.clock() // 1000

    def _alive(self, key: str) -> bool:
        if key not in self.types:
            return False
        when = self.expires.get(key)
        if when is not None and self._now_ms > when:
            self._delete(key)
            return False
        return True

    def _delete(self, key: str) -> bool:
        if key in self.types:
            del self.types[key]
            del self.data[key]
            self.expires.pop(key, None)
            return True
        return False

    def _typed(self, key: str, kind: str) -> Any:
        """The value of ``key`` if it is of ``kind``; None if absent; WRONGTYPE otherwise."""
        if not self._alive(key):
            return None
        if self.types[key] != kind:
            raise CommandError(WRONGTYPE)
        return self.data[key]

    def _set(self, key: str, kind: str, value: Any) -> None:
        self.types[key] = kind
        self.data[key] = value

    def _emptied(self, key: str) -> None:
        if not self.data[key]:
            self._delete(key)

    def live_keys(self) -> list[str]:
        self._now_ms = self.now_ms()
        return [key for key in list(self.types) if self._alive(key)]

    def pttl(self, key: str) -> int:
        self._now_ms = self.now_ms()
        return self.cmd_pttl([key])

    def flush(self) -> None:
        """Everything gone, as a server restarted without persistence."""
        self.version += 1
        self.data.clear()
        self.types.clear()
        self.expires.clear()
        self.scripts.clear()

    # -- entry points -------------------------------------------------------------------

    def execute(self, args: tuple[Any, ...] | list[Any]) -> Any:
        """Run one command from a client; its reply (errors as :class:`Error`)."""
        self.version += 1
        self._now_ms = self.clock() // 1000
        self.refused_writes = self.refused_reads = 0
        argv = [a if type(a) is str else _client_arg(a) for a in args]
        if self.on_command is not None:
            self.on_command(tuple(argv))
        return self._client_reply(self._dispatch(argv))

    def _client_reply(self, reply: Any) -> Any:
        kind = type(reply)
        if kind is int or reply is None:
            return reply
        if kind is list:
            return [
                item if type(item) is int else item.encode() if type(item) is str
                else self._client_reply(item)
                for item in reply
            ]  # fmt: skip
        if isinstance(reply, str):
            return reply.encode()
        if isinstance(reply, Status):
            return reply.text.encode()
        if isinstance(reply, list):
            return [self._client_reply(item) for item in reply]
        return reply

    def _dispatch(self, argv: list[str]) -> Any:
        if not argv:
            return Error("ERR empty command")
        handler = self._commands.get(argv[0].upper())
        if handler is None:
            return Error(f"ERR unknown command '{argv[0]}'")
        try:
            return handler(argv[1:])
        except CommandError as exc:
            return Error(str(exc))

    def _lua_call(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        try:
            argv = [a if type(a) is str else _lua_arg(a, self.lua_doubles) for a in args]
        except CommandError as exc:
            return (4, str(exc))
        if not argv:
            return (4, "ERR Please specify at least one argument for this redis lib call")
        handler = self._in_scripts.get(argv[0])
        if handler is None:
            name = argv[0].upper()
            handler = self._in_scripts.get(name)
            if handler is None:
                if name in _NOT_IN_SCRIPTS:
                    return (4, "ERR This Redis command is not allowed from script")
                return (4, "ERR Unknown Redis command called from script")
        if self._moving is not None and self._gone_from_here(argv):
            if argv[0].upper() not in _HARMLESS_WHEN_GONE:
                self.refused_writes += 1
            else:
                self.refused_reads += 1
            return (4, NON_LOCAL)
        try:
            reply = handler(argv[1:])
        except CommandError as exc:
            return (4, str(exc))
        kind = type(reply)
        if kind is str or kind is int:
            return (1, reply)
        return _to_lua(reply)

    def _gone_from_here(self, argv: list[str]) -> bool:
        """Does this command of a script on a migrating slot touch one of its keys that is
        gone (see ``migrating``)?"""
        name = argv[0].upper()
        if name in _KEYLESS:
            return False
        keys = argv[1:] if name in _ALL_KEYS else argv[1:2]
        assert self._moving is not None
        return any(key in self._moving and not self._alive(key) for key in keys)

    # -- scripting ----------------------------------------------------------------------

    def _script(self, source: str) -> Any:
        text = self.transform(source) if self.transform is not None else source
        compiled = self.lua.compiled.get(text)
        if compiled is None:
            compiled = self.lua.compiled[text] = self.lua.compile(text)
        self.scripts[_sha1(source)] = compiled
        return compiled

    def _eval(self, compiled: Any, rest: list[str]) -> Any:
        nkeys = _int(rest[0])
        if nkeys < 0:
            raise CommandError("ERR Number of keys can't be negative")
        if nkeys > len(rest) - 1:
            raise CommandError("ERR Number of keys can't be greater than number of args")
        keys = rest[1 : 1 + nkeys]
        moving = self.migrating and all(self._alive(key) for key in keys)
        self._moving = frozenset(keys) if moving else None
        self.script_depth += 1
        lua = self.lua
        outer, lua.store = lua.store, self
        try:
            reply = lua.run(compiled, nkeys, rest[1:])
        finally:
            self.script_depth -= 1
            lua.store = outer
            self._moving = None
        if isinstance(reply, bytes):
            return reply.decode()
        return self._decoded(reply)

    def _decoded(self, reply: Any) -> Any:
        if type(reply) is list:
            return [
                item if type(item) is str or type(item) is int or item is None
                else self._decoded(item)
                for item in reply
            ]  # fmt: skip
        if isinstance(reply, list):
            return [self._decoded(item) for item in reply]
        if isinstance(reply, bytes):
            return reply.decode()
        return reply

    def cmd_eval(self, args: list[str]) -> Any:
        if len(args) < 2:
            raise CommandError("ERR wrong number of arguments for 'eval' command")
        return self._eval(self._script(args[0]), args[1:])

    def cmd_evalsha(self, args: list[str]) -> Any:
        if len(args) < 2:
            raise CommandError("ERR wrong number of arguments for 'evalsha' command")
        compiled = self.scripts.get(args[0].lower())
        if compiled is None:
            return Error("NOSCRIPT No matching script. Please use EVAL.")
        return self._eval(compiled, args[1:])

    def cmd_script(self, args: list[str]) -> Any:
        sub = args[0].upper() if args else ""
        if sub == "LOAD" and len(args) == 2:
            self._script(args[1])
            return _sha1(args[1])
        if sub == "FLUSH":
            self.scripts.clear()
            return OK
        if sub == "EXISTS":
            return [1 if a.lower() in self.scripts else 0 for a in args[1:]]
        raise CommandError(SYNTAX)

    # -- strings and keys ---------------------------------------------------------------

    def cmd_get(self, args: list[str]) -> Any:
        return self._typed(args[0], "string")

    def cmd_set(self, args: list[str]) -> Any:
        if len(args) < 2:
            raise CommandError("ERR wrong number of arguments for 'set' command")
        key, value = args[0], args[1]
        nx = xx = keepttl = get = False
        expire_ms: int | None = None
        i = 2
        while i < len(args):
            opt = args[i].upper()
            if opt == "NX" and not xx:
                nx = True
            elif opt == "XX" and not nx:
                xx = True
            elif opt == "KEEPTTL" and expire_ms is None:
                keepttl = True
            elif opt == "GET":
                get = True
            elif opt in ("PX", "EX") and i + 1 < len(args) and expire_ms is None and not keepttl:
                amount = _int(args[i + 1])
                if amount <= 0:
                    raise CommandError("ERR invalid expire time in 'set' command")
                expire_ms = amount if opt == "PX" else amount * 1000
                i += 1
            else:
                raise CommandError(SYNTAX)
            i += 1
        old = self._typed(key, "string") if get else None
        exists = self._alive(key)
        if (nx and exists) or (xx and not exists):
            return old if get else None
        ttl_kept = self.expires.get(key) if keepttl else None
        self._delete(key)
        self._set(key, "string", value)
        if expire_ms is not None:
            self.expires[key] = self._now_ms + expire_ms
        elif ttl_kept is not None:
            self.expires[key] = ttl_kept
        return old if get else OK

    def cmd_del(self, args: list[str]) -> Any:
        return sum(1 for key in args if self._alive(key) and self._delete(key))

    def cmd_exists(self, args: list[str]) -> Any:
        return sum(1 for key in args if self._alive(key))

    def cmd_type(self, args: list[str]) -> Any:
        return Status(self.types[args[0]] if self._alive(args[0]) else "none")

    def cmd_pexpire(self, args: list[str]) -> Any:
        if len(args) != 2:
            raise CommandError("ERR wrong number of arguments for 'pexpire' command")
        amount = _int(args[1])
        if not self._alive(args[0]):
            return 0
        if amount <= 0:
            self._delete(args[0])
        else:
            self.expires[args[0]] = self._now_ms + amount
        return 1

    def cmd_persist(self, args: list[str]) -> Any:
        if self._alive(args[0]) and args[0] in self.expires:
            del self.expires[args[0]]
            return 1
        return 0

    def cmd_pttl(self, args: list[str]) -> Any:
        if not self._alive(args[0]):
            return -2
        when = self.expires.get(args[0])
        return -1 if when is None else max(0, when - self._now_ms)

    def cmd_ttl(self, args: list[str]) -> Any:
        left = self.cmd_pttl(args)
        return left if left < 0 else (left + 500) // 1000

    def cmd_incr(self, args: list[str]) -> Any:
        value = self._typed(args[0], "string")
        number = 0 if value is None else _int(value)
        number += 1
        self.data[args[0]] = str(number)
        self.types[args[0]] = "string"
        return number

    def cmd_dbsize(self, args: list[str]) -> Any:
        return len(self.live_keys())

    def cmd_keys(self, args: list[str]) -> Any:
        if args != ["*"]:
            raise CommandError("ERR only KEYS * is simulated")
        return sorted(self.live_keys())

    def cmd_flushall(self, args: list[str]) -> Any:
        self.data.clear()
        self.types.clear()
        self.expires.clear()
        return OK

    def cmd_time(self, args: list[str]) -> Any:
        micros = self.clock()
        return [str(micros // 1_000_000), str(micros % 1_000_000)]

    def cmd_wait(self, args: list[str]) -> Any:
        return 0  # no replicas

    def cmd_ping(self, args: list[str]) -> Any:
        return Status("PONG")

    # -- pub/sub ------------------------------------------------------------------------

    def cmd_publish(self, args: list[str]) -> Any:
        if len(args) != 2:
            raise CommandError("ERR wrong number of arguments for 'publish' command")
        if self.publish_hook is not None:
            return self.publish_hook(args[0], args[1])
        return self.channels.get(args[0], 0)

    def cmd_pubsub(self, args: list[str]) -> Any:
        if not args or args[0].upper() != "NUMSUB":
            raise CommandError(SYNTAX)
        reply: list[Any] = []
        for channel in args[1:]:
            if self.numsub_hook is not None:
                count = self.numsub_hook(channel)
            else:
                count = self.channels.get(channel, 0)
            reply += [channel, count]
        return reply

    # -- lists --------------------------------------------------------------------------

    def _push(self, args: list[str], front: bool) -> int:
        if len(args) < 2:
            raise CommandError("ERR wrong number of arguments for 'push' command")
        items = self._typed(args[0], "list")
        if items is None:
            items = []
            self._set(args[0], "list", items)
        for value in args[1:]:
            if front:
                items.insert(0, value)
            else:
                items.append(value)
        return len(items)

    def cmd_rpush(self, args: list[str]) -> Any:
        return self._push(args, front=False)

    def cmd_lpush(self, args: list[str]) -> Any:
        return self._push(args, front=True)

    def cmd_lpop(self, args: list[str]) -> Any:
        items = self._typed(args[0], "list")
        if len(args) > 1:
            count = _int(args[1])
            if items is None:
                return None
            taken = items[:count]
            del items[:count]
            self._emptied(args[0])
            return taken
        if items is None:
            return None
        value = items.pop(0)
        self._emptied(args[0])
        return value

    def cmd_lindex(self, args: list[str]) -> Any:
        items = self._typed(args[0], "list")
        index = _int(args[1])
        if items is None or not -len(items) <= index < len(items):
            return None
        return items[index]

    def cmd_llen(self, args: list[str]) -> Any:
        items = self._typed(args[0], "list")
        return 0 if items is None else len(items)

    def cmd_lrange(self, args: list[str]) -> Any:
        items = self._typed(args[0], "list")
        if items is None:
            return []
        return _range(items, _int(args[1]), _int(args[2]))

    def cmd_lrem(self, args: list[str]) -> Any:
        items = self._typed(args[0], "list")
        count = _int(args[1])
        value = args[2]
        if items is None:
            return 0
        removed = 0
        if count >= 0:
            i = 0
            while i < len(items) and (count == 0 or removed < count):
                if items[i] == value:
                    del items[i]
                    removed += 1
                else:
                    i += 1
        else:
            i = len(items) - 1
            while i >= 0 and removed < -count:
                if items[i] == value:
                    del items[i]
                    removed += 1
                i -= 1
        self._emptied(args[0])
        return removed

    def cmd_lpos(self, args: list[str]) -> Any:
        if len(args) != 2:
            raise CommandError("ERR only LPOS key element is simulated")
        items = self._typed(args[0], "list")
        if items is None:
            return None
        try:
            return items.index(args[1])
        except ValueError:
            return None

    # -- sorted sets --------------------------------------------------------------------

    def cmd_zadd(self, args: list[str]) -> Any:
        key = args[0]
        i = 1
        nx = xx = gt = lt = ch = False
        while i < len(args) and args[i].upper() in ("NX", "XX", "GT", "LT", "CH"):
            opt = args[i].upper()
            nx, xx = nx or opt == "NX", xx or opt == "XX"
            gt, lt, ch = gt or opt == "GT", lt or opt == "LT", ch or opt == "CH"
            i += 1
        pairs = args[i:]
        if not pairs or len(pairs) % 2:
            raise CommandError(SYNTAX)
        if nx and xx:
            raise CommandError("ERR XX and NX options at the same time are not compatible")
        if (gt and lt) or ((gt or lt) and nx):
            raise CommandError("ERR GT, LT, and/or NX options at the same time are not compatible")
        scores = [(_float(pairs[j]), pairs[j + 1]) for j in range(0, len(pairs), 2)]
        members = self._typed(key, "zset")
        if members is None:
            if xx:
                return 0
            members = {}
            self._set(key, "zset", members)
        added = changed = 0
        for score, member in scores:
            old = members.get(member)
            if old is None:
                if xx:
                    continue
                members[member] = score
                added += 1
                if self.admissions is not None:
                    now = self._now_ms
                    live = sum(1 for s in members.values() if s > now)
                    self.admissions.append((key, member, live))
            else:
                if nx or (gt and score <= old) or (lt and score >= old):
                    continue
                if score != old:
                    members[member] = score
                    changed += 1
        self._emptied(key)
        return added + changed if ch else added

    def cmd_zscore(self, args: list[str]) -> Any:
        members = self._typed(args[0], "zset")
        if members is None or args[1] not in members:
            return None
        return format_double(members[args[1]])

    def cmd_zrem(self, args: list[str]) -> Any:
        members = self._typed(args[0], "zset")
        if members is None:
            return 0
        removed = sum(1 for m in args[1:] if members.pop(m, None) is not None)
        self._emptied(args[0])
        return removed

    def cmd_zcard(self, args: list[str]) -> Any:
        members = self._typed(args[0], "zset")
        return 0 if members is None else len(members)

    def cmd_zcount(self, args: list[str]) -> Any:
        members = self._typed(args[0], "zset")
        low, high = _bound(args[1]), _bound(args[2])
        if members is None:
            return 0
        return sum(1 for score in members.values() if _in_range(score, low, high))

    def cmd_zremrangebyscore(self, args: list[str]) -> Any:
        members = self._typed(args[0], "zset")
        low, high = _bound(args[1]), _bound(args[2])
        if members is None:
            return 0
        gone = [m for m, score in members.items() if _in_range(score, low, high)]
        for member in gone:
            del members[member]
        self._emptied(args[0])
        return len(gone)

    def cmd_zrange(self, args: list[str]) -> Any:
        members = self._typed(args[0], "zset")
        start, stop = _int(args[1]), _int(args[2])
        rest = [a.upper() for a in args[3:]]
        if rest not in ([], ["WITHSCORES"]):
            raise CommandError(SYNTAX)
        if members is None:
            return []
        ordered = sorted(members.items(), key=lambda item: (item[1], item[0].encode()))
        chosen = _range(ordered, start, stop)
        if rest:
            return [x for member, score in chosen for x in (member, format_double(score))]
        return [member for member, _ in chosen]

    def cmd_zpopmin(self, args: list[str]) -> Any:
        members = self._typed(args[0], "zset")
        count = _int(args[1]) if len(args) > 1 else 1
        if count < 0:
            raise CommandError("ERR value is out of range, must be positive")
        if members is None or count == 0:
            return []
        ordered = sorted(members.items(), key=lambda item: (item[1], item[0].encode()))[:count]
        for member, _ in ordered:
            del members[member]
        self._emptied(args[0])
        return [x for member, score in ordered for x in (member, format_double(score))]

    # -- hashes (a throttle's state) --------------------------------------------------------

    def cmd_hset(self, args: list[str]) -> Any:
        if len(args) < 3 or len(args) % 2 == 0:
            raise CommandError("ERR wrong number of arguments for 'hset' command")
        fields = self._typed(args[0], "hash")
        if fields is None:
            fields = {}
            self._set(args[0], "hash", fields)
        added = 0
        for name, value in zip(args[1::2], args[2::2], strict=True):
            added += name not in fields
            fields[name] = value
        return added

    def cmd_hmget(self, args: list[str]) -> Any:
        fields = self._typed(args[0], "hash") or {}
        return [fields.get(name) for name in args[1:]]

    def cmd_hdel(self, args: list[str]) -> Any:
        fields = self._typed(args[0], "hash")
        if fields is None:
            return 0
        gone = sum(1 for name in args[1:] if fields.pop(name, None) is not None)
        self._emptied(args[0])
        return gone

    def cmd_hgetall(self, args: list[str]) -> Any:
        fields = self._typed(args[0], "hash") or {}
        return [x for name, value in fields.items() for x in (name, value)]


_COMMANDS = {name[4:].upper(): name for name in dir(Store) if name.startswith("cmd_")}
_NOT_IN_SCRIPTS = frozenset({"EVAL", "EVALSHA", "SCRIPT", "WAIT", "FLUSHALL", "SUBSCRIBE"})
_KEYLESS = frozenset({"TIME", "PUBLISH", "PUBSUB", "PING", "DBSIZE", "KEYS"})
_ALL_KEYS = frozenset({"DEL", "EXISTS"})  # every argument a key
# Commands whose reply on a missing key the scripts can stand for themselves (reads, and
# writes that change nothing there): a refusal of any other is a write that did not happen.
_HARMLESS_WHEN_GONE = frozenset(
    {"GET", "ZSCORE", "ZCARD", "ZRANGE", "ZPOPMIN", "ZREM", "ZREMRANGEBYSCORE", "PTTL", "EXISTS",
     "DEL", "PEXPIRE"}
)  # fmt: skip


def _range(items: list[Any], start: int, stop: int) -> list[Any]:
    n = len(items)
    if start < 0:
        start = max(0, n + start)
    if stop < 0:
        stop = n + stop
    if start > stop or start >= n:
        return []
    return items[start : min(stop, n - 1) + 1]
