"""Semantic mutants of the protocol, each of which some check must kill (issue 22 B.3).

    python -m tests.simulation.mutants                  # every mutant; prints the table
    python -m tests.simulation.mutants --jobs 2         # two at a time
    python -m tests.simulation.mutants --only lua:queue-join-moves-back,py:fresh-always
    python -m tests.simulation.mutants --list

A mutant is one text substitution, applied before loading: to the Lua script text (through
the simulated store's ``transform``, so the package's own files are never touched), or to
a Python module of the package (its source executed again, mutated, in the child process
that runs it, every ``from ... import`` of it in the package rebound). Each runs in a child
process: the simulator over up to ``--seeds`` schedules, stopping at the first broken
invariant; a mutant of code the simulator does not reach runs the named fast test files
instead, on a copy of the repository with the mutated file. Before the mutants, the
unmutated code must pass the same seeds (else every mutant would look killed).

A mutant that survives is a finding: a missing invariant, a hole in the fault weights, or a
branch that does not matter (then it should go). A mutant whose text is no longer in the
code is reported as stale: the code changed, the mutant must follow.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

import redlock_deco

# The package as imported (a checkout, or a copy of one put first on the path) and its root.
PACKAGE = Path(redlock_deco.__file__).parent
ROOT = PACKAGE.parent


@dataclass(frozen=True)
class Mutant:
    name: str  # "lua:..." for script text, "py:..." for a Python module
    what: str
    where: str  # a lua file name, or a module of the package ("_protocol")
    old: str
    new: str
    tests: tuple[str, ...] = ()  # run these test files instead of the simulator
    # The same mutation of earlier (or later) text of the code, tried if ``old`` is not there.
    alternatives: tuple[tuple[str, str], ...] = ()
    # Why no schedule can tell it from the code (a dead branch: a finding, reported in the
    # table; CI's sample leaves it out). Empty: it must be killed.
    equivalent: str = ""
    # A directed scenario (:mod:`.scenarios`) that kills it, run instead of the simulator:
    # for a branch the seeded schedules reach too rarely, or only under conditions they do
    # not draw.
    scenario: str = ""

    @property
    def lua(self) -> bool:
        return self.where.endswith(".lua")

    def pair(self, source: str) -> tuple[str, str] | None:
        """The (old, new) that applies to ``source``: its text found exactly once."""
        for old, new in ((self.old, self.new), *self.alternatives):
            if source.count(old) == 1:
                return old, new
        return None


def lua(
    name: str,
    what: str,
    where: str,
    old: str,
    new: str,
    *alternatives: str,
    equivalent: str = "",
    scenario: str = "",
    tests: tuple[str, ...] = (),
) -> Mutant:
    """``alternatives``: more (old, new) pairs, flattened. ``tests``: real-server test files
    that kill it, run instead of the simulator (a script it does not drive, such as adopt)."""
    pairs = tuple(zip(alternatives[::2], alternatives[1::2], strict=True))
    return Mutant(f"lua:{name}", what, where, old, new, tests, alternatives=pairs,
                  equivalent=equivalent, scenario=scenario)  # fmt: skip


def py(
    name: str, what: str, where: str, old: str, new: str, *tests: str, equivalent: str = ""
) -> Mutant:
    return Mutant(f"py:{name}", what, where, old, new, tests, equivalent=equivalent)


# redis-py 8.2 changed the pool's checkout (it reads pending pushes there), its handshake and
# its recovery from a half-closed connection: two mutants of _pools that the tests kill on
# redis-py 8.1 and older (checked with 8.1.0) no test tells apart on 8.2 (see each).
_REDIS_8_2 = tuple(int(part) for part in redis.__version__.split(".")[:2]) >= (8, 2)


def before_8_2(why: str) -> str:
    """``why`` as a mutant's ``equivalent`` on redis-py 8.2 and later, else nothing."""
    return f"with redis-py {redis.__version__}: {why}" if _REDIS_8_2 else ""


# A subclass's own exit (the sync wrapper), as it finds the block it leaves and tells the base's.
INNER_EXIT = (
    "            if _by is None:\n"
    "                ending = leaving(obj._blocks, None)\n"
    "            elif not hook_runs(_by):\n"
    "                # A block's second exit (see _take_exits) whose first ran, or still can: the\n"
    "                # user's hook once per block, not twice -- a hook pairing the block with a\n"
    "                # local lock of its own released it twice, the second time another thread's;\n"
    "                # and not at all for a block its entry hook gave up (review 86a, F3).\n"
    "                return _base_exit(obj)(obj, *exc, _by=_by)\n"
    "            before = _RUN_AS.get()\n"
    "            try:\n"
    "                run = _by or _leaving_as(ending)\n"
    "                if run is not None:  # (else an outer subclass's, as it is: review 75a, F3)\n"
    "                    _RUN_AS.set((run, mark()))\n"
)
INNER_EXIT_BY_PLACE = INNER_EXIT.replace(
    "ending = leaving(obj._blocks, None)", "ending = exiting(obj._blocks, place(obj._blocks))"
).replace(
    "                if run is not None:  # (else an outer subclass's, as it is: review 75a, F3)\n"
    "                    _RUN_AS.set((run, mark()))\n",
    "                _RUN_AS.set((run, mark()) if run is not None else None)\n",
)

# The asyncio renewal round's check for an extend() it waited behind (_renewal.AsyncRenewer).
RENEWED_MEANWHILE = (
    "    async def _run(self, job: Job) -> None:\n"
    "        started = time.monotonic()\n"
    "        if _renewed_meanwhile(job, started):\n"
)

# The asyncio acquire counted in flight from its first try to its end (_guard._take_async).
TAKE_COUNTED = (
    "    target.busy += 1\n"
    "    try:\n"
    "        return await _take_on_async(kind, options, name, key, wait, alive, taken, task,\n"
    "                                    before, target)  # fmt: skip\n"
    "    finally:\n"
    "        target.busy -= 1\n"
)


def _lease_counting_last() -> tuple[str, str]:
    """ownership.open_section's body as it is, and with its lease counting the section
    after the tables show it (as before review 71a's F2); ("", "") once the code changed
    (the mutant is then reported as naming no code)."""
    source = (PACKAGE / "_ownership.py").read_text("utf-8")
    enter = (
        "        if fresh:\n            lease._enter(section.entry[0])\n        else:\n"
        "            lease._reenter(section.entry[0])\n"
    )
    start = source.find(enter)
    end = source.find("        return section\n    except Left:\n")
    if start < 0 or end < start:
        return "", ""
    body = source[start:end]
    return body, body[len(enter) :] + enter


OPEN_SECTION_BODY, OPEN_SECTION_BODY_LEASE_LAST = _lease_counting_last()
CLOSE_BLOCK_TRY = (
    "    try:\n        where = ownership.place(blocks)\n"
    "        by = ownership.run_as(blocks, by, where)\n"
    "        section = ownership.exiting(blocks, "
    "where, by)\n        if section is None and blocks:\n            raise _unmatched_exit(blocks,"
    " where)\n        if section is not None and not ownership.ends(section, by):\n"
    "            section = None  # (ended by its other exit, or to be: see ownership.ends)\n"
    "        close_section(section, error)\n        if handled is not None:  "
    "# (closed: a cut as this returns must not give up another)\n"
    "            handled.append(True)\n"
    "    except BaseException as exc:\n        if handled is not None:\n"
    "            handled.append(True)\n"
)

MUTANTS: tuple[Mutant, ...] = (
    # -- the queue and the hand-off (lua/waiters.lua, included by every script) --------------
    lua("moving-refusal-raised", "on a cluster's slot being moved, a script reading a key it "
        "emptied stops half-way (review 35, 06)",
        "moving.lua", "      if string.find(reply.err, 'non local key', 1, true) then",
        "      if false then"),
    lua("moving-write-refusal-raised", "on a cluster's slot being moved, a hand-off write "
        "refused stops the script half-way",
        "waiters.lua", "    if string.find(reply.err, 'non local key', 1, true) then\n"
        "      return false", "    if false then\n      return false"),
    lua("moving-grant-told-unwritten", "a lock hand-off whose write a slot being moved refused "
        "still tells the waiter",
        "waiters.lua", "      if not written('SET', key, token, 'PX', ttl) then\n"
        "        written('ZADD', queue, 'NX', place, head)\n        break\n      end\n",
        "      written('SET', key, token, 'PX', ttl)\n"),
    lua("moving-reader-told-unwritten", "a reader admission whose write a slot being moved "
        "refused still tells the reader",
        "waiters.lua", "      local new = written('ZADD', readers, now + ttl, token)\n",
        "      local new = written('ZADD', readers, now + ttl, token) or 1\n",
        scenario="moving_slot_tells_no_unwritten_grant"),
    lua("queue-join-moves-back", "a join re-sent by a client retry, or a waiter checking "
        "again, moves the token to the back of the queue (a list queued it twice: review 2's a01)",
        "waiters.lua", "  if written('ZADD', queue, 'NX', place, item) then",
        "  if written('ZADD', queue, place, item) then"),
    lua("queue-no-expiry", "a join leaves the queue without an expiry",
        "waiters.lua", "    redis.call('PEXPIRE', queue, window)\n", ""),
    lua("grant-constant-lease", "a lock hand-off gives a constant lease, not the waiter's ttl",
        "waiters.lua", "      if not written('SET', key, token, 'PX', ttl) then",
        "      if not written('SET', key, token, 'PX', handoff) then"),
    lua("reader-grant-constant-lease", "a reader admitted by a hand-off gets a constant lease",
        "waiters.lua", "      local new = written('ZADD', readers, now + ttl, token)",
        "      local new = written('ZADD', readers, now + tonumber(handoff), token)"),
    lua("sem-grant-constant-lease", "a semaphore hand-off gives a constant lease",
        "waiters.lua", "written('ZADD', holders, now + ttl, token)",
        "written('ZADD', holders, now + tonumber(handoff), token)"),
    lua("sem-serve-without-limit", "a semaphore waiter is served without its own limit",
        "waiters.lua", "    if redis.call('ZCARD', holders) >= own_limit then",
        "    if false then"),
    lua("sem-serve-releasers-limit", "a semaphore waiter is served by the releaser's limit",
        "waiters.lua", "  return token, tonumber(own_ttl), tonumber(own_limit)",
        "  return token, tonumber(own_ttl), tonumber(limit)"),
    lua("publish-count-ignored", "a grant nobody heard (the process is gone) still stands",
        "waiters.lua", "  return counted == '0' or type(heard) ~= 'number' or heard > 0",
        "  return true"),
    lua("numsub-ignored", "a writer whose process is gone still keeps readers out",
        "waiters.lua",
        "  return type(found) ~= 'table' or found.err ~= nil or tonumber(found[2]) > 0",
        "  return true"),
    lua("queued-writer-ignored", "a listening writer at the head does not stop readers",
        "waiters.lua", "      if not reads(token) and listens(token, counted) then",
        "      if false then"),
    lua("shared-key-short", "the SHARED key ends before its longest reader's lease",
        "waiters.lua", "  local left = math.max(1, tonumber(last[2]) - now)",
        "  local left = math.max(1, tonumber(last[2]) - now - 100)"),
    # -- acquiring -----------------------------------------------------------------------------
    lua("confirm-keeps-entry", "a waiter confirming its hand-off stays queued (no ZREM)",
        "lock_acquire.lua",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n  redis.call('ZREM', KEYS[2], queued)\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        # In order, the key holds our token only after a serve popped our entry or after our
        # own SET NX in queue mode, which leaves the queue itself; but a delayed copy of our
        # first attempt (try mode, or the plain SET NX) can land after we queued.
        scenario="delayed_try_then_confirm_leaves_the_queue"),
    lua("retried-join-stays-queued", "an attempt that takes a free lock keeps the entry an "
        "earlier copy of it queued (the ghost finding, seeds 5651+)", "lock_acquire.lua",
        "  if mine and mode == '1' then\n", "  if false then\n"),
    lua("acquire-without-nx", "an attempt sets the lock key whoever holds it",
        "lock_acquire.lua",
        "    holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])",
        "    holder = redis.call('SET', KEYS[1], ARGV[1], 'GET', 'PX', ARGV[2])"),
    lua("own-token-unseen", "a retried attempt does not see that its first copy took the lock",
        "lock_acquire.lua", "if holder == ARGV[1] then",
        "if holder == ARGV[1] and mode == '2' then"),
    lua("free-lock-taken-past-queue", "an attempt on a free lock takes it past the one it served",
        "lock_acquire.lua",
        "  if served == ARGV[1] or redis.call('EXISTS', KEYS[1]) == 0 then", "  if true then"),
    lua("ended-readers-block-writer", "a writer cannot take a lock whose readers all ended",
        "lock_acquire.lua",
        "if not mine and holder == SHARED and readers_live(KEYS[3], now_ms()) == 0 then",
        "if false then",
        # The SHARED key ends with its longest reader (readers_settle): the branch serves the
        # last millisecond, where the key lives through `when` and the reader ended at it --
        # a writer asking then; the schedules land there about once in tens of thousands.
        scenario="ended_readers_free_the_lock"),
    lua("sem-no-sweep", "ended semaphore leases still count against the limit",
        "sem_acquire.lua",
        "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\nlocal count = ",
        "local count = ",
        "local swept = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)",
        "local swept = 0"),
    lua("sem-over-admit", "a semaphore admits one caller past its limit",
        "sem_acquire.lua", "if (count < limit and not behind) or redis.call('ZSCORE'",
        "if (count <= limit and not behind) or redis.call('ZSCORE'",
        "if count < limit or redis.call('ZSCORE', KEYS[1], ARGV[1]) then",
        "if count <= limit or redis.call('ZSCORE', KEYS[1], ARGV[1]) then"),
    lua("sem-newcomer-passes-queue", "a newcomer takes a free slot past the queued waiters",
        "sem_acquire.lua",
        "local behind = ARGV[6] == '1' and waiting\n", "local behind = false\n"),
    lua("sem-admitted-uncounted", "slots a serve just handed out are not counted",
        "sem_acquire.lua", "  count = count + admitted\n", "  count = count\n"),
    lua("sem-key-not-extended", "the holders' zset is not kept as long as a new lease",
        "sem_acquire.lua", "  if lives < ttl then\n", "  if false then\n"),
    lua("sem-confirm-keeps-entry", "a semaphore waiter admitted stays queued",
        "sem_acquire.lua",
        "  if mode ~= '0' and waiting ~= false then\n"
        "    -- (A queue seen empty above holds no entry of ours to take out.)\n"
        "    redis.call('ZREM', KEYS[2], queued)\n  end\n",
        "",
        # Where PUBLISH counts prove waiters gone, a queued waiter is admitted only by a serve,
        # which popped its entry; on a cluster a free slot goes to whoever asks, a queued
        # waiter's own attempt too (the simulator runs no cluster).
        scenario="uncounted_semaphore_admission_leaves_the_queue"),
    lua("readers-pass-queued-writer", "a reader comes in past a queued writer",
        "shared_acquire.lua",
        "  if admitted or ((not holder or holder == SHARED) and redis.call('EXISTS', KEYS[2]) "
        "== 0) then",
        "  if admitted or not holder or holder == SHARED then"),
    lua("reader-over-writer", "a reader comes in while a writer holds the lock",
        "shared_acquire.lua", "if not holder or holder == SHARED then\n", "if true then\n"),
    # -- releasing -----------------------------------------------------------------------------
    lua("release-without-token-check", "a release deletes the lock whoever holds it",
        "lock_release.lua", "if holder ~= ARGV[1] then", "if not holder then"),
    lua("release-without-handoff", "a release frees the lock without serving the queue",
        "lock_release.lua",
        "local served, live = lock_serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], 0)\n",
        "local served, live = nil, 0\n"),
    lua("release-deletes-the-grantees-key", "a release deletes the key after handing it over",
        "lock_release.lua", "if not served and live == 0 then\n", "if true then\n"),
    lua("release-keeps-its-key", "a release that served nobody leaves its token in the key",
        "lock_release.lua", "if not served and live == 0 then\n", "if false then\n"),
    lua("leaving-stays-queued", "a waiter giving up stays in the queue (every release script)",
        "lock_release.lua",
        "if ARGV[4] == '1' then\n  redis.call('ZREM', KEYS[2], ARGV[5])\nend\n",
        ""),
    lua("release-of-gone-is-released", "a release of a lease that ended says released",
        "lock_release.lua", "  if holder then\n    return 0\n  end\n  return 2\n",
        "  if holder then\n    return 0\n  end\n  return 1\n"),
    lua("sem-release-without-handoff", "a semaphore release serves nobody",
        "sem_release.lua",
        "sem_serve(KEYS[1], KEYS[2], KEYS[3], now, ARGV[2], ARGV[6], ARGV[3])\n", ""),
    lua("sem-leaving-serves-nobody",
        "a waiter giving up that holds no slot serves nobody (review 9, 04: the waiter behind "
        "a head held back by its own limit slept with a slot free)",
        "sem_release.lua", "local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])\nif ends then",
        "local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])\nif not ends then\n  return 2\n"
        "end\nif ends then",
        tests=("tests/integration/test_semaphore.py",)),
    lua("ended-slot-released", "releasing an ended slot or share says released",
        "sem_release.lua", "if tonumber(ends) <= now then\n  return 0\nend\nreturn 1",
        "return 1"),
    lua("shared-release-without-handoff", "the last reader out serves nobody",
        "shared_release.lua",
        "lock_serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], live)\nif tonumber(ends)",
        "if tonumber(ends)"),
    # -- adopting (review 9, 01: an adopt re-sent after its reply was lost answered 0) -------
    lua("adopt-resent-refused", "a re-sent adoption of a lock finds its own token and says no",
        "lock_adopt.lua", "if held_by == ARGV[2] then", "if false then",
        tests=("tests/integration/test_adopt.py",)),
    lua("sem-adopt-resent-refused", "a re-sent adoption of a slot finds its own and says no",
        "sem_adopt.lua", "if mine and tonumber(mine) > now then", "if false then",
        tests=("tests/integration/test_adopt.py",)),
    lua("shared-adopt-resent-refused", "a re-sent adoption of a reader finds its own, says no",
        "shared_adopt.lua", "if mine and tonumber(mine) > now then", "if false then",
        tests=("tests/integration/test_adopt.py",)),
    # -- renewing ------------------------------------------------------------------------------
    lua("extend-without-token-check", "a renewal extends the lock whoever holds it",
        "lock_extend.lua", "if redis.call('GET', KEYS[1]) ~= ARGV[1] then",
        "if redis.call('EXISTS', KEYS[1]) == 0 then"),
    lua("sem-extend-ended", "a semaphore renewal revives a lease that ended",
        "sem_extend.lua", "if not ends or tonumber(ends) <= now then", "if not ends then"),
    lua("shared-extend-key-unsettled", "a reader's renewal leaves the SHARED key's expiry",
        "shared_extend.lua", "readers_settle(KEYS[1], KEYS[2], now)\nreturn 1", "return 1"),
    # -- the client's decisions (_protocol.py) -------------------------------------------------
    py("fresh-always", "every grant is used as is, however late it is read",
       "_protocol", "    return not claim.confirm and age < claim.ttl_ms / 1000 * FRESH_FRACTION",
       "    return True"),
    py("fresh-fraction-2", "a grant older than its whole lease is used as is",
       "_protocol", "FRESH_FRACTION = 0.5", "FRESH_FRACTION = 2.0"),
    py("no-again-after-wait", "after a wait the next attempt is not AGAIN (old grants trusted)",
       "_protocol", "                mode = AGAIN\n", "                mode = mode\n"),
    py("handoff-measured-from-receipt", "a hand-off lease is measured from when it was read",
       "_protocol",
       "                    return Granted(None, sent_at)\n                # Ask the server",
       "                    return Granted(None, handed_at)\n                # Ask the server"),
    py("give-up-stays-queued", "a waiter whose wait ran out does not leave the queue",
       "_protocol", "                    if mode != TRY or plain:\n",
       "                    if False:\n"),
    py("plain-give-up-keeps-lease", "a waiter giving up after a plain SET NX does not release "
       "(a client retry of that SET may have taken the lease: the leftover finding, seed 533)",
       "_protocol", "                    if mode != TRY or plain:\n",
       "                    if mode != TRY:\n"),
    py("fresh-measured-when-read", "a grant's age is measured to when it was read, not used "
       "(the fresh finding, seed 24009)", "_protocol",
       "and _fresh(claim, clock() - sent_at):", "and _fresh(claim, handed_at - sent_at):"),
    py("no-recheck", "a waiter waits for its grant up to the holder's lease, not RECHECK",
       "_protocol", "max(MIN_WAIT, min(bound, RECHECK))", "max(MIN_WAIT, bound)"),
    py("release-gone-is-released", "a release that found its lease gone reports it released",
       "_protocol", 'return scripts.outcome("release", code) is Outcome.RELEASED',
       'return scripts.outcome("release", code) is not Outcome.NOT_OWNER'),
    py("extend-always-ok", "a renewal that found its lease gone reports it extended",
       "_protocol", 'return scripts.outcome("extend", code) is Outcome.EXTENDED', "return True"),
    py("entry-format-drift", "the leaving release names a queue entry the scripts never wrote",
       "_protocol", 'return f"{self.token}|{self.ttl_ms}|{self.limit}"',
       'return f"{self.token}|{self.ttl_ms}|{self.limit}|"'),
    # -- renewal and the lease's state (_renewal.py, _lifecycle.py, _guard.py) -----------------
    py("renewal-loss-silent", "a renewal that finds the lease gone does not mark it lost",
       "_renewal", "        lost = job._lose()", "        lost = False"),
    py("renewal-records-double", "a renewal records twice the ttl it sent",
       "_renewal", "        job._renewed(started, ttl_ms)",
       "        job._renewed(started, 2 * ttl_ms)"),
    py("renew-at-the-end", "renewals are due when the lease ends, not at a third of it",
       "_lifecycle", "RENEW_FRACTION = 1 / 3", "RENEW_FRACTION = 1.0"),
    py("never-presumed-lost", "renewals failing past the lease's end never mark it lost",
       "_lifecycle", "        if left <= 0:\n            return self._lose()",
       "        if False:\n            return self._lose()"),
    py("renewed-from-the-reply", "a renewal's new end is measured from its reply, not its send",
       "_lifecycle", "        self.expires_at = started + held_for(self.target, ttl_ms)",
       "        self.expires_at = time.monotonic() + held_for(self.target, ttl_ms)"),
    py("released-always-kept", "the outermost exit reports the lease kept, whatever it found",
       "_guard", "    released = answer if answer is not None else lease.remaining() > 0",
       "    released = True"),
    # -- grants (_waiting.py) ------------------------------------------------------------------
    py("no-give-back", "a grant nobody in the process waits for is kept, not given back",
       "_waiting", "return None, granted_claim(message, self.counted)", "return None, None"),
    py("give-back-any-grant", "every grant nobody waits for is given back (late copies too)",
       "_waiting", "        if registry.give_back(token, where) or (\n"
       "            abandon_closed() and registry.give_back(token, where)\n        ):",
       "        if True:"),
    # -- code the simulator does not reach: named fast tests ---------------------------------
    py("quorum-majority", "a semaphore's quorum is a simple majority", "_quorum",
       "    return masters * limit // (limit + 1) + 1", "    return masters // 2 + 1",
       "tests/test_core_quorum.py"),
    py("reenter-ended-lease", "a lease that ended by the clock can be re-entered", "_lifecycle",
       "            ended = self.state is not State.HELD or self.remaining() == 0\n",
       "            ended = self.state is not State.HELD\n", "tests/test_core_renewal.py"),
    # -- ownership and the guard (issue 22 A.4/A.5): the real-server tests that state them -
    py("reenter-any-owner", "a section re-enters a name held by any owner on its thread (another "
       "task of the loop), not only its own", "_ownership",
       "    return tables(owner)[0].get(key)",
       "    return next((held for held in process.thread_owner().here\n"
       "                 if (held.provider, held.key) == key), None)",
       "tests/integration/test_async_ownership.py", "tests/integration/test_asyncio.py",
       "tests/integration/test_ownership_model.py"),
    py("renew-after-owner-ended", "a lease whose owner ended without releasing is renewed on",
       "_renewal", "    if not job.alive():", "    if False:", "tests/core/test_core_renewal.py"),
    py("give-back-cut-short-dropped", "a give-back task cancelled (before its first step, at a "
       "loop's end) leaves the grant to its ttl", "_waiting",
       "            if task.cancelled():\n", "            if False:\n",
       "tests/integration/test_shutdown.py"),
    py("generator-self-wait", "a step of a generator run by another thread or task waits "
       "for its own generator's block", "_ownership", "    if _generator_on_this_stack(key):",
       "    if False:", "tests/integration/test_async_ownership.py"),
    py("exit-stack-guessed", "an exit through an ExitStack is matched by frame and owner, "
       "not by its stack", "_ownership",
       "    if by is not None:  # (one an entry took: see run_as; the caller checks ends())\n",
       "    if False:\n",
       "tests/integration/test_handed_out_blocks.py"),
    py("pushed-exit-guessed", "an exit pushed onto a stack by hand takes one of several blocks",
       "_ownership", "        if (len(rest) == 1 and rest[0].at < 0",
       "        if (rest and rest[0].at < 0",
       "tests/integration/test_handed_out_blocks.py"),
    py("shutdown-waits-for-strangers", "a loop's shutdown waits for any task closing a "
       "generator, not only those it closes itself", "_process",
       "    siblings = _gathered_with(me)\n", "    siblings = None\n",
       "tests/integration/test_shutdown.py"),
    py("take-not-in-flight", "an asyncio acquire's first try and give-back are not counted in "
       "flight", "_guard", TAKE_COUNTED, TAKE_COUNTED.replace("busy += 1", "busy += 0")
       .replace("busy -= 1", "busy -= 0"),
       "tests/integration/test_shutdown.py"),
    py("renewal-round-cancel-unseen", "a renewal round cancelled before its first step leaves "
       "its lease marked as renewing: never renewed again, never reported lost", "_renewal",
       "            job.renewing = False\n            self._rounds.discard(round_)",
       "            self._rounds.discard(round_)", "tests/integration/test_shutdown.py"),
    py("renewer-timer-cut", "an exception in the asyncio renewer's look leaves it without a "
       "timer (no lease of the loop renewed or reported lost)", "_renewal",
       "            self._arm(time.monotonic() + RETRY_AFTER_INTERRUPT)\n",
       "            pass\n", "tests/integration/test_renewer_interrupts.py"),
    py("renewal-undoes-extend", "a renewal round that waited behind an extend() renews to "
       "the usual ttl (asyncio)", "_renewal", RENEWED_MEANWHILE,
       RENEWED_MEANWHILE.replace("if _renewed_meanwhile(job, started):", "if False:"),
       "tests/integration/test_renewal.py"),
    py("overdue-only-in-flight", "a held lease that ran out is reported lost only if its round "
       "was in flight (asyncio)", "_renewal", "now, idle_too=True)", "now, idle_too=False)",
       "tests/integration/test_renewal.py"),
    py("owner-end-silent", "a lease whose owner ended with its block open stops renewing "
       "without a word", "_renewal", "        if job._lose():\n            notify_lost(job)",
       "        if job._orphan():\n            notify_lost(job)",
       "tests/core/test_core_renewal.py"),
    py("interrupted-acquire-kept", "a lease taken by an acquire that was then interrupted is "
       "kept, not given back", "_guard",
       "    _stop(lease)\n    if lease.pid == os.getpid():\n        try:\n            _cut_short(",
       "    _stop(lease)\n    if False:\n        try:\n            _cut_short(",
       "tests/integration/test_cancellation.py"),
    # -- the connections and the drivers (no simulator: their tests) ------------------------
    py("connect-cut-short-kept", "a pool's connections are left as redis-py makes them: a "
       "connect cut short by an interrupt stays in the pool half-connected", "_pools",
       "    mixin = WholeAsyncConnect if asynchronous else WholeConnect\n",
       "    return\n", "tests/integration/test_connect_interrupts.py"),
    py("owed-reply-kept", "a connection given back to its pool owing a reply is left open: the "
       "next command on it reads that reply", "_pools",
       "            counted._stale = True\n", "            pass\n",
       "tests/integration/test_connect_interrupts.py"),
    py("error-reply-uncounted", "an error reply is not counted as a reply read: every "
       "connection a handshake answered with an error reconnects at each command", "_pools",
       "            self._read_one()\n            raise\n", "            raise\n",
       "tests/integration/test_reply_search.py"),
    py("pipeline-counted-once", "a pipeline's write counts one reply owed, not one per "
       "command", "_pools", "replies = self._packed or 1", "replies = 1",
       "tests/integration/test_reply_search.py"),
    py("disconnect-cut-unfinished", "a disconnect cut short is not finished: the connection "
       "keeps its socket with no reader", "_pools",
       "            super().disconnect()  # type: ignore[misc]\n            self._forget()\n"
       "            raise\n", "            raise\n",
       "tests/integration/test_connect_interrupts.py",
       equivalent=before_8_2(
           "redis-py recovers a connection whose reader was closed itself (the next checkout "
           "reconnects it); test_a_disconnect_cut_short_is_finished kills it on 8.1 and older"
       )),
    py("count-before-health-check", "the count is raised before redis-py's health check, "
       "whose failed PING disconnects and forgets it", "_pools",
       "        self._ready(check_health)\n        self._owed += replies\n",
       "        self._owed += replies\n        self._ready(check_health)\n",
       "tests/integration/test_connect_interrupts.py"),
    py("size-taken-after-health-check", "a pipeline's size is taken after the connect and the "
       "health check, whose PING (written through the same method) took it as its own", "_pools",
       "        self._ready(check_health)\n        self._owed += replies\n",
       "        self._ready(check_health)\n        self._owed += self._packed or 1\n"
       "        self._packed = 0\n",
       "tests/integration/test_connect_interrupts.py",
       equivalent=before_8_2(
           "no test tells it apart yet (open: the 8.2 handshake sends its health-checked PINGs "
           "another way); test_an_interrupt_inside_redis_py_in_a_first_wait_leaves_hand_offs_"
           "working[client] kills it on 8.1 and older"
       )),
    py("interrupted-read-kept", "a read cut short that redis-py was told not to disconnect "
       "on (the client-side cache's read of invalidations) leaves the connection in the pool "
       "as it is, its buffer maybe wrong", "_pools",
       "                self._unfit = True\n", "                pass\n",
       "tests/integration/test_connect_interrupts.py"),
    py("unfit-on-any-cut-read", "any read cut short with its socket open makes the "
       "connection unfit, though redis-py rewound its buffer (a subscription waiting)",
       "_pools", "            if self._sock is not None and _buffer_broken(self):",
       "            if self._sock is not None:", "tests/integration/test_connect_interrupts.py"),
    py("stale-kept-after-disconnect", "a connection closed and connected again keeps its "
       "mark of unfit, and is closed again at its next use", "_pools",
       "        self._stale = False\n        self._unfit = False\n", "",
       "tests/integration/test_connect_interrupts.py"),
    py("spare-owing-reused", "a spare slot's connection owing a reply is used again (it never "
       "goes back through the pool's release, which marks it)", "_drivers",
       "                counted is not None and bool(", "                False and bool(",
       "tests/integration/test_connect_interrupts.py"),
    py("late-guard-trusts-idle", "the connections a pool had before the library's first call "
       "are trusted to owe nothing", "_pools",
       "        if _connected(connection):\n            connection._stale = True\n",
       "        if _connected(connection):\n            pass\n",
       "tests/integration/test_connect_interrupts.py"),
    py("async-release-unmarked", "an asyncio pool's release does not mark a connection given "
       "back owing a reply", "_pools",
       "connection._unknown:\n                connection._stale = True\n",
       "connection._unknown:\n                pass\n",
       "tests/integration/test_connect_interrupts.py"),
    py("async-single-unmarked", "an asyncio single-connection client's connection is not "
       "known as one: a command written on it owing a reply reads that reply", "_pools",
       "        connection._single = True\n", "        pass\n",
       "tests/integration/test_connect_interrupts.py"),
    py("async-single-closed-in-handshake", "an asyncio single-connection client's connection "
       "written on owing a reply inside its own handshake is closed", "_pools",
       "(self._single and self._owed and not self._handshaking())",
       "(self._single and self._owed)",
       "tests/integration/test_connect_interrupts.py"),
    py("async-stale-written-on", "a stale asyncio connection is written on (closed only by a "
       "checkout's connect)", "_pools",
       "        if self._stale or (self._single", "        if False or (self._single",
       "tests/integration/test_connect_interrupts.py"),
    py("async-timed-out-read-counted", "an asyncio read given a timeout that ran out counts a "
       "reply read", "_pools",
       "        if reply is None and timeout is not None:", "        if False:",
       "tests/integration/test_connect_interrupts.py"),
    py("async-node-unmarked", "an asyncio cluster node hands out a connection owing a reply "
       "as it is", "_pools",
       "            connection._stale = True\n        return connection",
       "            pass\n        return connection",
       "tests/integration/test_topologies.py"),
    py("async-nodes-unguarded", "the library's commands on an asyncio cluster leave its nodes "
       "unguarded", "_drivers",
       "            guard_async_nodes(self.client)  #", "            str(self.client)  #",
       "tests/integration/test_topologies.py"),
    py("guard-trusts-checked-out", "a connection checked out when the library first guards "
       "its pool (or an asyncio cluster node) is trusted to owe nothing when it goes back",
       "_pools", "    else:\n        connection._unknown = True\n", "    else:\n        pass\n",
       "tests/integration/test_connect_interrupts.py", "tests/integration/test_topologies.py"),
    py("guard-trusts-unconnected", "a connection checked out and not connected yet when the "
       "library first guards its pool is trusted to owe nothing (its connect under way writes "
       "its command uncounted)", "_pools",
       "    else:\n        connection._unknown = True\n",
       "    elif _connected(connection):\n        connection._unknown = True\n",
       "tests/integration/test_connect_interrupts.py"),
    py("release-ignores-unknown", "a sync pool's release ignores a connection's count being "
       "unknown", "_pools", "(counted._owed or counted._stale or counted._unknown)",
       "(counted._owed or counted._stale)", "tests/integration/test_connect_interrupts.py"),
    py("sync-single-trusts-unknown", "a sync single-connection client's connection made whole "
       "while it was the client's is trusted to owe nothing", "_drivers",
       "counted._owed or counted._stale or counted._unfit or counted._unknown",
       "counted._owed or counted._stale or counted._unfit",
       "tests/integration/test_connect_interrupts.py"),
    py("sync-single-unmarked", "a sync single-connection client's connection is not known "
       "as one: the application's command written on it owing a reply reads that reply",
       "_drivers", "                counted._single = True\n", "                pass\n",
       "tests/integration/test_connect_interrupts.py"),
    py("push-counted-as-reply", "an invalidation push read by redis-py's client-side cache "
       "before a command is counted as a reply owed", "_pools",
       "        if pushes and _never_a_reply(pushes[-1]):", "        if False:",
       "tests/integration/test_connect_interrupts.py"),
    py("single-drained-unclosed", "a sync single-connection client's connection owing a cut "
       "command's reply is read by redis-py's client-side cache before the next command "
       "(not closed first): an error reply is raised by that command", "_pools",
       "        self._before_use()\n        try:\n            return bool(",
       "        self._close_if_stale()\n        self._refuse_if_unfit()\n"
       "        try:\n            return bool(",
       "tests/integration/test_connect_interrupts.py"),
    py("single-unfit-refused", "a sync single-connection client's connection whose read a "
       "cut left unfit refuses the next command with a ConnectionError (nothing sends it "
       "again) instead of connecting again", "_pools",
       "            if self._single:\n                return\n", "",
       "tests/integration/test_connect_interrupts.py"),
    py("long-move-raw-ask", "a replicated attempt refused by a move past the library's "
       "patience raises redis-py's AskError, not the ClusterError promised (sync)", "_drivers",
       "raise still_moving(exc) from exc  # (not AskError: GUARANTEES)", "raise",
       "tests/integration/test_topologies.py"),
    py("long-move-raw-ask-async", "the asyncio twin of long-move-raw-ask", "_drivers",
       "raise still_moving(exc) from exc  # (as the sync driver's)", "raise",
       "tests/integration/test_topologies.py"),
    py("held-lock-inherited", "a forked child keeps the lock of the object-held leases as "
       "the parent's thread held it at the fork", "_guard",
       "os.register_at_fork(after_in_child=_unheld_in_child)", "",
       "tests/integration/test_fork_locks.py"),
    py("registering-lock-inherited", "a forked child keeps the listeners' registration lock "
       "as the parent's thread held it at the fork", "_events",
       "os.register_at_fork(after_in_child=_unheld_in_child)", "",
       "tests/integration/test_fork_locks.py"),
    py("single-unmade", "a sync single-connection client's connection the pool's guard never "
       "saw (a pool reset after the client took it) is sent through plain, uncounted",
       "_drivers",
       "counted = None if conn is None else made_whole(conn, WholeConnect, idle=False)",
       "counted = None if conn is None else counting(conn)",
       "tests/integration/test_connect_interrupts.py"),
    py("async-single-unmade", "the asyncio twin of single-unmade", "_pools",
       "        connection = made_whole(client.connection, WholeAsyncConnect, idle=False)\n",
       "        connection = client.connection\n",
       "tests/integration/test_connect_interrupts.py"),
    py("single-lock-inherited", "a forked child keeps a single-connection client's lock as a "
       "parent's thread held it at the fork", "_pools",
       "os.register_at_fork(after_in_child=_forked)", "",
       "tests/integration/test_direct_writes.py"),
    py("renewal-one-lane", "the sync renewer's rounds of one target run one at a time (a "
       "stopped quorum master's node timeout each)", "_renewal",
       "RENEWAL_LANES = 8", "RENEWAL_LANES = 1", "tests/integration/test_quorum.py"),
    py("renewer-ends-without-threads", "the sync renewer ends when a renewal worker's thread "
       "cannot start (a limit on threads), its batch marked as renewing for good", "_renewal",
       "                    unsent.append(job)\n", "                    return\n",
       "tests/integration/test_renewal.py"),
    py("renewer-runs-rounds-itself", "the sync renewer runs a round on its own thread when no "
       "renewal thread can start (a stalled server's round holds up every lease's)", "_renewal",
       "                    unsent.append(job)\n", "                    self._run_safely(job)\n",
       "tests/integration/test_renewal.py"),
    py("unsent-rounds-forgotten", "rounds no renewal thread could take are not tried again",
       "_renewal", "            stuck, sending, unsent = bool(unsent), unsent + ready, []\n",
       "            stuck, sending, unsent = bool(unsent), ready, []\n",
       "tests/integration/test_renewal.py"),
    py("lanes-inherited-in-child", "a forked child's renewer goes round its parent's renewal "
       "workers (their locks maybe held at the fork, their queues the parent's rounds)",
       "_renewal", "    global _LANES\n    _LANES = weakref.WeakSet()\n", "    global _LANES\n",
       "tests/integration/test_fork_locks.py"),
    py("overdue-on-lost-on-renewer", "the sync renewer runs an overdue lease's on_lost on its "
       "own thread (a slow one holds up every provider's renewals)", "_renewal",
       "                _tell_lost(job)\n", "                notify_lost(job)\n",
       "tests/integration/test_renewal.py"),
    py("retired-async-target-forgotten", "aclose() looks only at the loop's current targets "
       "(one replaced by a provider registered again is closed under what it owes)",
       "_process", "        return [*self.targets.values(), *self.retired]\n",
       "        return [*self.targets.values()]\n", "tests/integration/test_quorum.py"),
    py("on-lost-one-thread", "overdue leases' on_lost run one after another on one thread "
       "(a slow one holds up the others' loss signals)", "_renewal",
       '        _NOTIFIER.append(Lanes("redlock-deco-on-lost", RENEWAL_LANES))\n',
       '        _NOTIFIER.append(Lanes("redlock-deco-on-lost", 1))\n',
       "tests/integration/test_renewal.py"),
    py("retire-iterates-live-set", "registering a provider walks a loop's live set of leases "
       "from the registering thread", "_process",
       "for lease in list(self.leases) if lease.held}", "for lease in self.leases if lease.held}",
       "tests/integration/test_providers.py"),
    py("async-target-unstamped", "a loop's target is used whatever registration it was built "
       "from (a registration cut short leaves the loop on the old server)", "_providers",
       "    if target is not None and state.built.get(name, _UNBUILT) is registration:\n",
       "    if target is not None:\n", "tests/integration/test_providers.py"),
    py("sync-target-unstamped", "the process's sync target is used whatever registration it "
       "was built from", "_providers",
       "    if target is not None and process.sync_built.get(name, _UNBUILT) is "
       "_registered.get(name):\n",
       "    if target is not None:\n", "tests/integration/test_providers.py"),
    py("renewer-ends-on-its-own-error", "an exception out of the sync renewer's loop ends its "
       "thread (nothing renewed or reported lost until the next acquire)", "_renewal",
       "            except Exception:\n                log.exception(\"the lease renewer",
       "            except ZeroDivisionError:\n                log.exception(\"the lease renewer",
       "tests/integration/test_renewal.py"),
    py("renewal-listener-exit-escapes", "a listener's SystemExit on a renewal's event escapes "
       "(on_lost skipped; asyncio.run ended)", "_events",
       "    except BaseException:\n        log.exception(\"redlock_deco event listener failed on "
       "%s (renewals go on)\"",
       "    except Exception:\n        log.exception(\"redlock_deco event listener failed on "
       "%s (renewals go on)\"", "tests/integration/test_events.py"),
    py("decorated-close-cut-left-to-collector", "a decorated call whose close_section was "
       "cut as it started leaves the section to the collector (held while the exception is "
       "kept)", "_decorators", "                guard.abort_open(section, exc)\n",
       "                pass\n", "tests/integration/test_kept_interrupts.py"),
    py("multi-close-cut-left-to-collector", "the same for a multi-name call's close_sections",
       "_decorators", "                guard.abort_open(sections, exc)\n", "                pass\n",
       "tests/integration/test_kept_interrupts.py"),
    py("block-exit-cut-left-to-collector", "a with block's exit whose close_block was cut as "
       "it started leaves the block open (held while the exception is kept)", "_primitive",
       "                guard.close_block_cut(self._blocks, error, _by)\n",
       "                pass\n",
       "tests/integration/test_kept_interrupts.py"),
    py("enter-cut-block-kept-open", "a long-lived object's block cut as open_section returned "
       "into __enter__ stays open on the object", "_primitive",
       "                section = ownership.entered_since(self._blocks, since)\n"
       "            if section is not None:\n                guard.abort(section, exc)\n",
       "                pass\n"
       "            if section is not None:\n                guard.abort(section, exc)\n",
       "tests/integration/test_kept_interrupts.py"),
    py("async-enter-cut-block-kept-open", "an asyncio object's block cut as open_section_async "
       "returned into __aenter__ stays open on the object", "_primitive",
       "            if section is None:  # (see Primitive.__enter__)\n"
       "                section = ownership.entered_since(self._blocks, since)\n",
       "            if section is None:  # (see Primitive.__enter__)\n                pass\n",
       "tests/integration/test_kept_interrupts.py"),
    py("lease-counts-section-last", "a section is in its owner's tables before its lease "
       "counts it (an entry of the name run in between re-enters the lease, and its exit gives "
       "it back)", "_ownership", OPEN_SECTION_BODY, OPEN_SECTION_BODY_LEASE_LAST,
       "tests/integration/test_stack_windows.py"),
    py("ended-owners-stale-block-kept", "a block an ended thread left on a stack stays in "
       "its object for good", "_ownership",
       "            if (section.open and (section.owner() is owner or _owner_ended(section))\n",
       "            if (section.open and (section.owner() is owner)\n",
       "tests/integration/test_stack_windows.py"),
    py("no-second-exit", "a block entered through an ExitStack puts no exit of its own on the "
       "stack (one cut off from contextlib's stays held until the object's next entry)",
       "_ownership",
       "    callbacks.append((where.sync, MethodType(second, where.obj)))\n",
       "    pass\n", "tests/integration/test_stack_windows.py"),
    py("second-exit-always-ends", "a block's second exit ends it even while contextlib's can "
       "still run (another thread's close, as the entry pushes, gives the block up)",
       "_ownership", "    if first is None or not _can_run(first):\n",
       "    if True:\n", "tests/integration/test_stack_windows.py"),
    py("can-run-blind-to-running-frames", "contextlib's exit about to be pushed by a running "
       "entry counts as never to run", "_ownership",
       "    return any(value is exit or getattr(value, \"__func__\", None) is exit for value in "
       "found)\n",
       "    return False\n", "tests/integration/test_stack_windows.py"),
    py("can-run-blind-to-stacks", "contextlib's exit on a stack (handed on by pop_all() between "
       "the two pushes) counts as never to run", "_ownership",
       "        return any(_on_a_stack(entry) for entry in gc.get_referrers(holder))\n",
       "        return False\n",
       "tests/integration/test_stack_windows.py"),
    py("stale-stack-block-kept", "a block cut off from contextlib's exit stays held until its "
       "stack's next close, whoever enters the object", "_ownership",
       "                over.append(section)\n            continue\n        if section.owner() "
       "is not owner:\n",
       "                pass\n            continue\n        if section.owner() "
       "is not owner:\n", "tests/integration/test_stack_windows.py"),
    py("stale-when-not-where-pushed", "a block whose exit is not on the callbacks it was pushed "
       "to counts as cut off", "_ownership",
       "    return not _can_run(first)\n\n\ndef _bound_to", "    return True\n\n\ndef _bound_to",
       "tests/integration/test_stack_windows.py"),
    py("second-exit-ends-again", "a block's second exit closes it again after contextlib's "
       "ended it", "_ownership", "        return False  # (its other exit ended it)\n",
       "        pass\n", "tests/integration/test_stack_windows.py"),
    py("exit-gone-kept-open", "a block whose every exit is collected unrun (its stack dropped "
       "unclosed) stays held", "_ownership",
       "            if close(block):\n                block.dropped(block.lease)\n",
       "            if False:\n                block.dropped(block.lease)\n",
       "tests/integration/test_kept_interrupts.py"),
    py("subclass-exit-not-hooked", "a subclass's own __exit__/__aexit__ is left as it is (its "
       "stack entries get no exit of their own: a stack's exit ends the frame's newest block)",
       "_primitive", "                setattr(cls, name, own)\n",
       "                pass\n", "tests/integration/test_stack_windows.py"),
    py("subclass-enter-not-hooked", "a subclass's own __enter__/__aenter__ is left as it is (a "
       "decorator's wrapper on it is taken for the frame running the with statement)",
       "_primitive",
       "        for name in _HOOK_NAMES:\n",
       "        for name in _HOOK_NAMES - {\"__enter__\", \"__aenter__\"}:\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("entry-hooks-own-blocks-taken-for-leftovers", "a block an entry hook entered itself (a "
       "`with self:` inside it, super().__enter__() twice) is taken for a leftover of the with "
       "statement entering, and given up", "_ownership",
       "            if section.entry[0] < since:  # (else one of the running entry hook's own)\n",
       "            if True:\n", "tests/integration/test_wrapped_hooks.py"),
    py("hook-put-on-later-left-as-is", "a hook put on a class after it was made (wrapt's "
       "wrap_function_wrapper, an assignment) is left as it is", "_primitive",
       "            value = ownership.overriding(value, name)\n", "            pass\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("proxy-taken-for-a-hook", "a proxy around one of the package's hooks (wrapt's "
       "FunctionWrapper) is taken for it, and left unwrapped", "_ownership",
       "    func = hook.func if type(hook) is ExitHook else hook\n"
       "    return type(func) is FunctionType and func.__code__ in _HOOK_CODES\n",
       "    return getattr(getattr(hook, \"func\", hook), \"__code__\", None) in _HOOK_CODES\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("cancelled-subscriber-not-revived", "the asyncio grant subscriber task, cancelled from "
       "outside while a task waits, is not started again at the waiter's recheck (its grants "
       "go to nobody, and it starves under steady hand-offs)", "_waiting",
       "        self._owner.revive()\n", "        pass\n", "tests/integration/test_handoff.py"),
    py("one-entering-mark-per-thread", "a running entry hook's mark is one per thread or "
       "task: another object's hook inside it (a partner's, entering this one again) replaces "
       "it, and this one's first block is taken for a leftover", "_ownership",
       "    return (*running, (blocks, since))\n", "    return ((blocks, since),)\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("cut-entry-hook-leaves-its-blocks", "an entry hook cut after the base's entry (a signal "
       "as a call returns in its wrapper) leaves the blocks it entered open, held and renewed",
       "_ownership",
       "                try:\n"
       "                    _ENTERING.set(before)\n"
       "                    _given_up(obj, lambda: _hook_entered(obj, since), exc)\n"
       "                except BaseException:\n"
       "                    _ENTERING.set(before)\n"
       "                    _given_up(obj, lambda: _hook_entered(obj, since), exc)\n"
       "                    raise\n",
       "                _ENTERING.set(before)\n", "tests/integration/test_wrapped_hooks.py"),
    py("cut-exit-hook-leaves-its-block", "an exit hook that raises (cut) before it reaches "
       "the base's exit leaves its block open, held and renewed", "_ownership",
       "        ending = _by.section if _by is not None else None\n"
       "        try:\n"
       "            if _by is None:",
       "        ending = _by.section if _by is not None else None\n"
       "        try:\n"
       "            if _by is None:\n"
       "                with contextlib.suppress(BaseException):\n"
       "                    return _bound(func, obj)(*exc)\n"
       "                return None\n"
       "            if _by is None:",
       "tests/integration/test_wrapped_hooks.py"),
    py("exit-hook-gives-up-its-block-alone", "an exit hook that raises gives up the block it "
       "ends, not the others its statement's entry hook left open (a weighted "
       "super().__enter__() twice)", "_ownership",
       "        and (other is section or (statement is not None and other.statement == "
       "statement))\n",
       "        and other is section\n", "tests/integration/test_hook_shapes.py"),
    py("stack-exit-hook-gives-nothing-up", "an exit hook that raises before the base's, run as "
       "an ExitStack's exit, gives its block up only if it was a with statement's", "_ownership",
       "    if by is None and ending is None:\n        ending = leaving(obj._blocks, None)\n",
       "    if by is not None:\n        return []\n    if ending is None:\n"
       "        ending = leaving(obj._blocks, None)\n", "tests/integration/test_wrapped_hooks.py"),
    py("second-exit-runs-the-hook", "a block's second exit on an ExitStack runs the subclass's "
       "own exit hook again, and for an entry its hook refused", "_ownership",
       "    if by.first is None:\n        return True\n", "    return True\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("async-clean-up-awaited-as-is", "an async hook's clean-up awaits what the object's "
       "returns, None on a sync primitive", "_ownership",
       "    return await result if inspect.isawaitable(result) else result\n",
       "    return await result\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("weighted-stack-entry-shares-no-exits", "a second block one entry through an ExitStack "
       "enters (a weighted super().__enter__() twice) gets no exit", "_ownership",
       "                _share_exits(section, taken)\n", "                pass\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("can-run-looks-from-its-own-frame", "the check whether a stack's exit can still run "
       "looks at this thread's frames from its own, held in its locals (a cycle)",
       "_ownership", "    tops[threading.get_ident()] = sys._getframe(1)\n", "",
       "tests/integration/test_wrapped_hooks.py"),
    py("hook-give-up-not-repeated", "a signal cutting the give-up of what a raising exit hook "
       "left open is not followed by a second one", "_ownership",
       "            except BaseException:\n"
       "                _given_up(obj, lambda: _left_open(obj, _by, ending), error)\n"
       "                raise\n",
       "            except BaseException:\n                raise\n",
       "tests/integration/test_hook_shapes.py::"
       "test_an_interrupt_at_every_line_of_a_raising_hooks_statement"),
    py("block-given-up-once", "a signal cutting one block's give-up (after its close, before "
       "its lease is given back) is not followed by a second", "_ownership",
       "        try:\n            obj._abort_block(section, error)\n        except BaseException:\n"
       "            obj._abort_block(section, error)\n            raise\n",
       "        obj._abort_block(section, error)\n",
       "tests/integration/test_hook_shapes.py::"
       "test_an_interrupt_at_every_line_of_a_raising_hooks_statement"),
    py("board-forget-read-then-delete", "a waiter's entry on a subscriber's board is read, "
       "then deleted (two threads clearing an abandoned loop's board race)", "_waiting",
       "        found = self.waiting.pop(token, None)\n        if found is waiter:\n",
       "        found = self.waiting.get(token)\n        if found is waiter:\n"
       "            del self.waiting[token]\n",
       "tests/integration/test_waiting.py::test_two_threads_forgetting_one_waiter_at_once_both_finish"),
    py("shielded-base-exit-ends-another-block", "the base's exit reached inside a subclass's "
       "own __aexit__ in a task of its own (asyncio.shield) is not told which block the "
       "statement leaves", "_ownership",
       "                    run = _by or _leaving_as(ending)\n",
       "                    run = _by\n",
       "tests/integration/test_wrapped_hooks.py::"
       "test_a_base_exit_shielded_in_a_task_of_its_own_ends_the_statements_block"),
    py("forked-uvloop-subscription-kept", "a forked child leaves its copy of an asyncio "
       "subscription's socket open when the transport's socket is no socket.socket (uvloop)",
       "_waiting", "    elif sock is not None:\n", "    elif False:\n",
       "tests/integration/test_handoff.py::"
       "test_a_forked_child_does_not_keep_its_dead_parents_waiters_listening"),
    py("subscriber-started-with-no-time-left", "an asyncio waiter whose wait has run out "
       "(a replicated attempt's WAIT took it all) still starts the loop's grant subscriber",
       "_waiting",
       "        if timeout <= 0 and not self.listening:\n            # The wait ran out",
       "        if False:\n            # The wait ran out",
       "tests/integration/test_waiting.py::test_a_wait_that_ran_out_starts_no_subscriber"),
    py("dropped-async-section-left-to-its-ttl", "an asyncio section dropped open (a stack "
       "never closed: its closing task cancelled before its first step) only stops renewing, "
       "and its lease stays held by nobody for its ttl", "_guard",
       "        found.call_soon_threadsafe(_give_back_dropped, lease, "
       "context=contextvars.Context())\n",
       "        pass\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_an_async_stack_never_closed_gives_its_lease_back_at_once"),
    py("reentry-blind-to-a-last-exit", "a re-entry does not see that the lease's last "
       "section has just left in another thread (a handed-out stack closed there): it opens "
       "a nested block on a lease on its way back", "_lifecycle",
       "            left = self.left\n", "            left = False\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_a_handed_out_block_closed_at_each_line_of_its_owners_reentry"),
    py("reentry-checked-apart-from-its-count", "a re-entry's check of the lease and its count "
       "are not one step against a last exit in another thread", "_lifecycle",
       "        with self._gated():\n            # Counted first",
       "        if True:\n            # Counted first",
       "tests/integration/test_handed_out_blocks.py::"
       "test_a_reentry_at_each_line_of_a_last_exit_elsewhere_is_never_given_back_under_it"),
    py("last-exit-pops-the-owners-table-first", "a last exit forgets the lease in its owner's "
       "table before the thread's record: an owner re-entering in between refuses to wait "
       "for itself", "_ownership",
       "        section.here.pop(lease, None)\n        hk = (lease.provider, lease.key)\n",
       "        hk = (lease.provider, lease.key)\n"
       "        section.held.pop(hk, None) if section.held.get(hk) is lease else None\n"
       "        section.here.pop(lease, None)\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_a_reentry_at_each_line_of_a_last_exit_elsewhere_is_never_given_back_under_it"),
    py("subscription-released-before-forgotten", "a grant subscription's pool gives its "
       "connection back before the subscription forgets it: cut in between, its finaliser "
       "closes the connection another user has checked out since", "_waiting",
       "        pubsub.connection_pool = _ForgettingPool(pool, pubsub)\n",
       "        pass\n",
       "tests/integration/test_waiting.py::"
       "test_a_grant_subscription_cut_as_it_closes_never_closes_a_connection_in_use"),
    py("other-loop-release-judged-after-its-hand-over", "a block closed from another loop "
       "hands its release to the home loop, then judges kept or lost: the home loop, "
       "running, released it first, and a released lease has no time left (a false LockLost)",
       "_guard",
       "            kept = not lease.lost and lease.remaining() > 0\n"
       "            with contextlib.suppress(RuntimeError):  # (closed: its shutdown released it)\n"
       "                home.call_soon_threadsafe(_give_back_dropped, lease, "
       "context=contextvars.Context())\n",
       "            with contextlib.suppress(RuntimeError):  # (closed: its shutdown released it)\n"
       "                home.call_soon_threadsafe(_give_back_dropped, lease, "
       "context=contextvars.Context())\n"
       "            kept = not lease.lost and lease.remaining() > 0\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_a_block_closed_from_another_loop_with_its_home_loop_run_at_each_line"),
    py("a-lease-left-twice", "a last exit run inside another (a finaliser inside the "
       "re-entrant gate) answers 'last' as the outer one does: given back twice",
       "_lifecycle", "                return self.last_out == section\n",
       "                return True\n",
       "tests/core/test_guard_decisions.py::"
       "test_a_lease_has_one_last_exit_even_when_one_runs_inside_another"),
    py("dropped-lease-released-silently", "a block dropped open is given back in the "
       "background with no 'released' event", "_guard",
       "        cleanup = Cleanup(lease.claim, lease.target, time.monotonic(), lease)\n",
       "        cleanup = Cleanup(lease.claim, lease.target, time.monotonic())\n",
       "tests/integration/test_events.py::"
       "test_a_lease_given_up_without_its_exit_still_ends_with_released"),
    py("abandoned-lease-released-silently", "an acquire cut short after it took the lease "
       "gives it back with no 'released' event", "_guard",
       "    say_released(lease, 0.0)\n", "    pass\n",
       "tests/integration/test_events.py::"
       "test_a_lease_given_up_without_its_exit_still_ends_with_released"),
    py("shutdown-release-silent", "a lease its loop's shutdown releases has no 'released' "
       "event", "_process",
       "        say_released(lease, time.monotonic() - lease.acquired_at)\n", "        pass\n",
       "tests/integration/test_events.py::"
       "test_a_lease_given_up_without_its_exit_still_ends_with_released"),
    py("second-subscription-in-a-full-pool", "an interrupted reader's new subscription, "
       "made beside the old one, takes a connection of a pool that raises when full",
       "_waiting", "    if not cached(client) and not (beside and fills_up(pool)):\n",
       "    if not cached(client):\n",
       "tests/integration/test_waiting.py::"
       "test_an_interrupted_readers_new_subscription_takes_no_connection_from_a_full_pool"),
    py("repeated-last-exit-answers-no", "the last exit, repeated by an interrupted exit's "
       "clean-up, is no longer the last: the lease stays held and renewed", "_lifecycle",
       "                return self.last_out == section\n", "                return False\n",
       "tests/core/test_guard_decisions.py::"
       "test_a_lease_has_one_last_exit_even_when_one_runs_inside_another"),
    py("released-said-twice", "a lease's 'released' is sent again by a path that gives it "
       "up after a listener's interrupt", "_lifecycle",
       "    if lease.said_released:\n        return\n", "    if False:\n        return\n",
       "tests/integration/test_events.py::"
       "test_an_interrupt_out_of_a_released_listener_says_released_once"),
    py("unheard-release-silent", "a release its asyncio caller stopped waiting for lands "
       "with no 'released'", "_guard",
       "                releasing.add_done_callback(partial(_released_unheard, lease, was_lost))\n",
       "                pass\n",
       "tests/integration/test_events.py::"
       "test_an_asyncio_exit_cancelled_twice_while_releasing_still_ends_with_released"),
    py("released-marked-before-it-is-sent", "a lease is marked as having said 'released' "
       "before any listener hears it: an interrupt on the way leaves it never said", "_lifecycle",
       "    events.emit(\"released\", lease.name, lease.key, held, lease.source,\n"
       "                heard=partial(setattr, lease, \"said_released\", True))  # fmt: skip\n",
       "    lease.said_released = True\n"
       "    events.emit(\"released\", lease.name, lease.key, held, lease.source)\n",
       "tests/integration/test_events.py::"
       "test_an_interrupt_at_each_point_of_sending_released_says_it_once"),
    py("released-marked-apart-from-its-first-listener", "the mark that 'released' was said "
       "and the first listener's call are two calls: a signal between them leaves it marked "
       "and never said", "_events",
       "                list(map(_call, (first, partial(listener, event))))\n",
       "                first()\n                listener(event)\n",
       "tests/integration/test_events.py::"
       "test_an_interrupt_at_each_point_of_sending_released_says_it_once"),
    py("lost-said-by-each-finder", "the release says 'lost' whenever it finds the lease gone: "
       "a renewal that found it so as the release began has said it already", "_lifecycle",
       "    if lease._lose() and events.listeners and not lease.said_released:\n",
       "    lease._lose()\n    if events.listeners and not lease.said_released:\n",
       "tests/integration/test_events.py::"
       "test_a_renewal_finding_the_lease_gone_at_each_line_of_its_release_says_lost_once"),
    py("extend-finding-it-gone-says-nothing", "an extend() that finds the lease gone marks "
       "it lost and says nothing: no 'lost' for that lease at all", "_primitive",
       "                renewal.renewer().reschedule(lease)\n                raise\n"
       "            if not extended:\n                found_lost(lease)\n",
       "                renewal.renewer().reschedule(lease)\n                raise\n"
       "            if not extended:\n                lease._lose()\n",
       "tests/integration/test_events.py::"
       "test_an_extend_that_finds_the_lease_gone_says_lost_once"),
    py("asyncio-wait-sent-after-the-stop", "an asyncio target stopped by its loop's shutdown "
       "still starts a wait: it revives the subscriber, which hears a grant that can be "
       "neither confirmed nor given back", "_drivers",
       "        self.check_open(step)\n        if kind is Wait:\n",
       "        if kind is Wait:\n",
       "tests/integration/test_shutdown.py::"
       "test_a_waiter_whose_loop_stops_at_any_step_is_refused_at_once_and_leaves_nothing"),
    py("stopped-subscriber-wakes-no-waiter", "an asyncio subscriber stopped by its loop's "
       "shutdown leaves its waiters asleep: each is refused only at its next recheck",
       "_waiting", "        for waiter in list(self._board.waiting.values()):\n"
       "            waiter.wake()\n", "",
       "tests/integration/test_shutdown.py::"
       "test_a_waiter_whose_loop_stops_at_any_step_is_refused_at_once_and_leaves_nothing"),
    py("acquire-cut-as-it-returns-kept", "an object's acquire() that raises as acquire_held "
       "returns into it (Python 3.10 raises a pending signal there) leaves the object holding, "
       "renewed, with its caller never releasing", "_primitive",
       "                                      wait, self._alive, self._watch, taken)  # fmt: skip\n"
       "        except BaseException as exc:  # (cut as it returned: see guard.give_back_taken)\n"
       "            guard.give_back_taken(self._held, taken, exc)\n",
       "                                      wait, self._alive, self._watch, taken)  # fmt: skip\n"
       "        except BaseException as exc:  # (cut as it returned: see guard.give_back_taken)\n",
       "tests/integration/test_interrupts.py::"
       "test_a_keyboard_interrupt_at_every_line_leaves_nothing_held[bare-acquire]"),
    py("adopt-cut-as-it-returns-kept", "an object's adopt() that raises as adopt_held returns "
       "into it leaves the object holding, renewed, with its caller never releasing",
       "_primitive",
       "                                    token, self._alive, self._watch, taken)  # fmt: skip\n"
       "        except BaseException as exc:  # (cut as it returned: see guard.give_back_taken)\n"
       "            guard.give_back_taken(self._held, taken, exc)\n",
       "                                    token, self._alive, self._watch, taken)  # fmt: skip\n"
       "        except BaseException as exc:  # (cut as it returned: see guard.give_back_taken)\n",
       "tests/integration/test_interrupts.py::"
       "test_a_keyboard_interrupt_at_every_line_leaves_nothing_held[adopted]"),
    py("object-cut-gives-nothing-back-in-its-place", "an object's acquire() cut short after "
       "another thread's release() took its lease as the newest gives nothing back in its "
       "place: the lease that release was meant for stays held and renewed", "_guard",
       "            elif lease.popped:\n                _move_newest(held, instead, os.getpid())\n",
       "",
       "tests/integration/test_interrupts.py::"
       "test_a_keyboard_interrupt_at_every_line_leaves_nothing_held[shared-semaphore-object]"),
    py("hand-over-cut-as-it-returns-kept", "an object's hand_over() that raises as "
       "hand_over_held returns into it loses the token with the lease held by nobody",
       "_primitive", "            guard.give_back_popped(self._held, popped, exc)\n", "",
       "tests/integration/test_interrupts.py::"
       "test_a_keyboard_interrupt_at_every_line_leaves_nothing_held[adopted]"),
    py("move-takes-a-popped-lease", "a release() or hand_over() takes a lease another one, cut "
       "short, already marked as its own: that one's clean-up gives it back under the other",
       "_guard", "        if lease.pid != pid or lease.popped:\n",
       "        if lease.pid != pid:\n",
       "tests/integration/test_interrupts.py::"
       "test_a_release_cut_as_it_moves_its_lease_never_gives_back_another_threads_hand_over"),
    py("cut-move-not-reclaimed", "a release() cut between marking its lease and moving it "
       "leaves the lease in the object's list, marked: no release takes it again", "_guard",
       "    except BaseException as exc:\n        _reclaim(held, popped)\n        for lease in "
       "popped:\n            _forget_held(held, lease)  # an interrupt between _pop_held's two "
       "lines\n            _abandon(lease, exc)\n",
       "    except BaseException as exc:\n        for lease in "
       "popped:\n            _forget_held(held, lease)  # an interrupt between _pop_held's two "
       "lines\n            _abandon(lease, exc)\n",
       "tests/integration/test_interrupts.py::"
       "test_a_keyboard_interrupt_at_every_line_leaves_nothing_held[bare-acquire]"),
    py("collected-copy-warns-in-a-child", "a forked child's copy of a holding object warns, "
       "when collected, of a lease its parent holds and renews", "_primitive",
       "lease.pid == pid and lease.held", "lease.held",
       "tests/integration/test_ownership_model.py::"
       "test_a_forked_childs_copy_of_a_holding_object_says_nothing_when_collected"),
    py("quorum-round-sent-after-the-stop", "a quorum target stopped by its loop's shutdown "
       "still runs its waiters' rounds and sleeps: they poll on until their wait runs out",
       "_fanout", "        for node in self.nodes:\n            node.check_open(step.step if "
       "isinstance(step, Fanout) else step)\n", "",
       "tests/integration/test_quorum.py::"
       "test_quorum_waiters_are_refused_at_once_at_their_loops_shutdown"),
    py("queued-master-command-sent-after-seal", "a command queued behind one a stalled "
       "master owed is sent once the loop's shutdown closed the client: it reconnects, and is "
       "left pending and unclosed as the loop closes", "_fanout",
       "                self.node.check_open(step)\n"
       "                return await self._send(step)\n",
       "                return await self._send(step)\n",
       "tests/integration/test_quorum.py::"
       "test_a_stalled_masters_owed_commands_end_with_their_loop_quietly"),
    py("stopped-target-gives-nothing-back", "an asyncio target stopped by its loop's "
       "shutdown refuses its waiters' leaving too: a hand-off the still open subscription "
       "took stays with a refused waiter for its ttl", "_drivers",
       "        if self.sealed or (self.closed and not gives_back(step)):\n",
       "        if self.sealed or self.closed:\n",
       "tests/integration/test_shutdown.py::"
       "test_a_waiter_whose_loop_stops_at_any_step_is_refused_at_once_and_leaves_nothing",
       "tests/integration/test_shutdown.py::"
       "test_aclose_with_waiters_queued_and_releases_at_that_moment_leaves_nothing"),
    py("shutdown-seals-while-waiters-leave", "a loop's shutdown closes its clients once "
       "nothing is sent, not waiting for the waiters its stop refused to leave the queue",
       "_process", "        await _while(self._in_use, grace)\n",
       "        await _while(lambda: any(target.sending for target in self._all_targets()), "
       "grace)\n",
       "tests/integration/test_shutdown.py::"
       "test_aclose_with_waiters_queued_and_releases_at_that_moment_leaves_nothing"),
    py("shutdown-never-seals", "a loop's shutdown closes its clients but lets give-backs "
       "through after: one reconnects the closed client, never closed again", "_drivers",
       "        self.closed = self.sealed = True\n", "        self.closed = True\n",
       "tests/integration/test_shutdown.py"),
    py("asyncio-idle-subscriber-closed-as-it-ends", "the asyncio subscriber closes its idle "
       "subscription as its task ends: a waiter coming meanwhile starts a second one beside it",
       "_waiting", "                if self._board.waiting:  # (shaped for Python 3.13: see "
       "test_back_edges)\n                    continue\n                break\n",
       "                break\n",
       "tests/integration/test_waiting.py::"
       "test_an_asyncio_subscriber_closing_as_a_waiter_comes_keeps_one_subscription"),
    py("quorum-lane-places-given-back-one-by-one", "a quorum round gives its masters' lane "
       "places back one at a time: a signal between two loses the later ones", "_fanout",
       "            give_places()\n            for call in calls:\n",
       "            for call in calls:\n                call.give_place()\n",
       "tests/integration/test_quorum.py::"
       "test_an_interrupt_wherever_a_signal_lands_in_a_quorum_round_loses_no_lane_place"),
    py("cluster-subscription-pool-not-forgetting", "a cluster's grant subscription, whose "
       "pool is picked at its SUBSCRIBE, keeps redis-py's pool: a cut reset closes another "
       "user's connection later", "_waiting",
       "    pubsub.subscribe(channel())\n"
       "    _forgetting(pubsub)  # (a cluster's has its pool now)\n",
       "    pubsub.subscribe(channel())\n",
       "tests/integration/test_topologies.py::"
       "test_a_cluster_grant_subscription_cut_as_it_closes_never_closes_a_connection_in_use"),
    py("quorum-give-back-built-in-finally", "a quorum round builds its lane places' give-back "
       "in its finally: a signal as map() returns there leaves every place taken", "_fanout",
       "            give_places()\n",
       "            list(map(_GIVE_PLACES, map(_PLACE_OF, calls)))\n",
       "tests/integration/test_quorum.py::"
       "test_an_interrupt_wherever_a_signal_lands_in_a_quorum_round_loses_no_lane_place"),
    py("extend-revives-a-lost-lease", "extend() on a lease already reported lost (on_lost "
       "ran) extends the key and returns: the block's exit then raises LockLost", "_primitive",
       "        with lease.io:  # ordered with this lease's renewals: see lifecycle.Lease.renewed\n"
       "            if lease.lost:\n",
       "        with lease.io:  # ordered with this lease's renewals: see lifecycle.Lease.renewed\n"
       "            if False:\n",
       "tests/integration/test_decorator.py::"
       "test_an_extend_after_the_lease_was_reported_lost_is_refused"),
    py("held-for-counts-the-whole-ttl", "a single server's lease is counted on for its whole "
       "ttl: a share or slot the server scored in whole milliseconds ends first, and a rival "
       "gets in while remaining() says it holds", "_quorum",
       "    return (ttl_ms - SCORED_IN_MS) / 1000\n", "    return ttl_ms / 1000\n",
       "tests/integration/test_decorator.py::"
       "test_no_rival_gets_in_while_the_holders_remaining_says_it_holds"),
    py("lane-place-given-back-in-python", "a lane place is given back by a Python method: a "
       "Ctrl-C as it starts loses the place, and the process's renewals and releases wait "
       "for it", "_drivers",
       "        self.release: Callable[[], None] = functools.partial(self._free.put, None)\n",
       "        self.release: Callable[[], None] = self._give_back\n\n"
       "    def _give_back(self) -> None:\n        self._free.put(None)\n",
       "tests/integration/test_interrupts.py::"
       "test_a_keyboard_interrupt_at_every_line_leaves_nothing_held[with-block]"),
    py("owners-table-popped-ungated", "a last exit's check and pop of its owner's table are "
       "two steps: the owner's new reader lease, recorded between them, is popped",
       "_ownership", "        with lease._gated():\n            if section.held.get(hk)",
       "        if True:\n            if section.held.get(hk)",
       "tests/integration/test_handed_out_blocks.py::"
       "test_a_reentry_at_each_line_of_a_last_exit_elsewhere_is_never_given_back_under_it"),
    py("dropped-stack-blocks-closed-twice", "a stack dropped unclosed closes its block twice "
       "(once as itself, once as its statement's): given back twice, the second release "
       "reports the lease lost", "_ownership",
       "        for block in ending if section in ending else [section, *ending]:\n",
       "        for block in [section, *ending]:\n",
       "tests/integration/test_handed_out_blocks.py"),
    py("sections-of-both-kinds-share-a-lease", "a sync section inside an asyncio one of the "
       "same task and name (or the reverse) re-enters its lease: its last exit runs the other "
       "kind's release", "_guard",
       "    if isinstance(held.io, asyncio.Lock) != asynchronous:\n", "    if False:\n",
       "tests/integration/test_ownership_model.py::"
       "test_a_section_of_the_other_kind_inside_a_tasks_section_is_refused"),
    py("cut-reentry-drops-its-last-verdict", "a re-entry cut short after its outer block "
       "closed elsewhere closes the lease's last section and gives nothing back", "_ownership",
       "        if close(section) and not fresh:\n", "        if close(section) and False:\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_a_reentry_cut_after_its_outer_block_closed_elsewhere_gives_the_lease_back"),
    py("reentry-checked-before-counted", "a re-entry checks the lease before it counts "
       "itself: same-thread code run in between closes the outer block and gives the lease "
       "back under the nested one", "_lifecycle",
       "            self.sections.add(section)\n            left = self.left\n",
       "            left = self.left\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_a_handler_closing_the_outer_block_inside_a_reentry_leaves_it_protected"),
    py("async-release-sent-from-the-closers-loop", "an asyncio block closed by a task of "
       "another loop is released from that loop (another loop's clients)", "_guard",
       "        if home is not None and home is not asyncio.get_running_loop():\n",
       "        if False:\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_an_async_block_handed_to_another_threads_loop_is_released_there"),
    py("extend-from-another-loop", "extend() and owned() of an asyncio lease from a task of "
       "another event loop send on the home loop's clients", "_guard",
       "    if home is None or home is asyncio.get_running_loop():\n        return\n",
       "    return\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_an_asyncio_lease_is_extended_and_checked_only_from_its_own_loop"),
    py("lapsed-lease-released-from-another-loop-as-kept", "a release or exit from another "
       "loop of a lease whose end has passed (its stopped loop renewed it no more) returns "
       "as if it had been kept to the end", "_guard",
       "            kept = not lease.lost and lease.remaining() > 0\n",
       "            kept = not lease.lost\n",
       "tests/integration/test_handed_out_blocks.py::"
       "test_a_lease_whose_stopped_loop_let_it_lapse_is_reported_lost_from_another_loop"),
    py("child-waits-on-a-parents-gate", "a forked child takes a lease's gate, which a "
       "thread of the parent may have held at the fork", "_lifecycle",
       "        return self._gate if self.pid == os.getpid() else contextlib.nullcontext()\n",
       "        return self._gate\n",
       "tests/integration/test_fork_locks.py::"
       "test_a_leases_gate_held_at_a_fork_lets_the_child_leave_its_sections"),
    py("child-exit-blind-to-a-parents-block", "a forked child's exit of a with block it "
       "inherited matches none of the object's blocks (a new owner) and raises LockError",
       "_ownership",
       "                section.lease.pid != os.getpid()  # (a parent's, its frame copied at the "
       "fork)\n                or (\n",
       "                False\n                or (\n",
       "tests/integration/test_fork_locks.py::"
       "test_a_child_forked_inside_a_with_block_leaves_it_quietly"),
    py("generator-taken-for-a-hooks-helper", "a generator advanced inside an entry hook, "
       "entering the object, is taken for the hook's helper: its block for the statement's",
       "_ownership",
       "            if blocks is not None and blocks.hooked and not _in_generator(frame):\n",
       "            if blocks is not None and blocks.hooked:\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("stand-in-taken-by-another-blocks-exit", "the stand-in for the block a subclass's exit "
       "leaves is taken by another block's exit inside the hook (a generator closed there)",
       "_ownership",
       "    if (exit.func is _no_exit and inner is not None and inner.frame == where.frame\n",
       "    if (False and inner is not None and inner.frame == where.frame\n",
       "tests/integration/test_wrapped_hooks.py"),
    py("hook-frames-taken-for-the-statement", "the user's frames between a subclass's own hook "
       "and the base's (a decorator's wrapper, a helper) are taken for the frame running the "
       "with statement", "_ownership",
       "                hook = _hook_above(frame, blocks)\n",
       "                pass\n", "tests/integration/test_wrapped_hooks.py"),
    py("exit-read-by-hand-is-a-stack-exit", "an exit read off the class and called by hand "
       "(a subclass naming Lock.__exit__) is taken for one an entry through a stack took",
       "_ownership", "    if by is not None and by.section is not None:\n        return by\n",
       "    if by is not None:\n        return by\n", "tests/integration/test_stack_windows.py"),
    py("subclass-enter-taken-for-the-statement", "a subclass's own __enter__ is taken for the "
       "frame running the with statement (it ends at once, and hides an ExitStack's entry)",
       "_ownership",
       "        elif not module.startswith(\"redlock_deco\") and not _own_hook(frame, blocks):\n",
       "        elif not module.startswith(\"redlock_deco\"):\n",
       "tests/integration/test_stack_windows.py"),
    py("inner-subclass-exit-hides-outer", "a subclass's own exit reached through super() from "
       "another subclass's records that it was run as no stack's exit (it finds its block "
       "by place alone, and overwrites the outer one's when it finds none: either alone is "
       "masked by the other)", "_ownership", INNER_EXIT, INNER_EXIT_BY_PLACE,
       "tests/integration/test_stack_windows.py"),
    py("run-as-for-inner-blocks", "what a subclass's own exit was run as is taken by the exit of "
       "a block entered inside it", "_ownership",
       "    if inner is not None and inner.entry[0] > since:\n        return None\n",
       "    if False:\n        return None\n", "tests/integration/test_stack_windows.py",
       "tests/integration/test_wrapped_hooks.py"),
    py("same-frame-any-owner", "a by-hand exit ends another owner's block entered from a frame "
       "with the same id (a reused id: that owner's block goes while its body runs)",
       "_ownership",
       "            if section.body is where.body and (\n",
       "            if True or (\n",
       "tests/integration/test_stack_windows.py"),
    py("same-frame-by-id-and-code", "another owner's block is matched by its frame's id and "
       "code, not by the frame itself (a generator's or coroutine's that ended: a new one "
       "with its id ends that owner's live block)", "_ownership",
       "                    (section.inside is not None and section.inside is where.here)\n"
       "                    if section.at < 0\n",
       "                    True\n                    if section.at < 0\n",
       "tests/integration/test_stack_windows.py"),
    py("entering-frame-not-held", "a block entered in a frame that may be suspended does not "
       "keep that frame (another owner running it -- a step, a close -- is not matched to it)",
       "_ownership",
       "        if section.exit is None and where.at < 0:\n"
       "            section.inside = where.here\n",
       "        if False:\n            section.inside = where.here\n",
       "tests/integration/test_stack_windows.py"),
    py("coroutine-close-awaits-its-exit", "a coroutine being closed (the collector dropping a "
       "pending task) awaits its block's release in the exit", "_ownership",
       "    if frame is None or not frame.f_code.co_flags & _AWAITING:\n"
       "        return False\n",
       "    if True:\n        return False\n",
       "tests/integration/test_stack_windows.py"),
    py("generator-exit-taken-for-a-close", "a GeneratorExit passing through a coroutine its "
       "task runs is taken for the coroutine's close (its lost lease goes unreported)",
       "_ownership",
       "        if parent is None or parent.f_lasti not in _await_offsets(parent.f_code):\n",
       "        if True:\n", "tests/integration/test_stack_windows.py"),
    py("async-with-not-told-from-by-hand", "an async generator's by-hand entry is taken for an "
       "`async with` statement's (another task's exit from a new generator with its frame's id "
       "ends it)", "_ownership",
       "        if name in _WITH_NAMES or (name in _AWAITS and last == _ASYNC_ENTRY):\n",
       "        if name in _WITH_NAMES or name in _AWAITS:\n",
       "tests/integration/test_stack_windows.py"),
    py("interrupted-reader-leaves-others-unsubscribed", "a reader interrupted as its grant "
       "comes goes without subscribing again for the process's other waiters (its release "
       "hands the lock to one of them on a channel nobody listens on: skipped)", "_waiting",
       "            try:\n                self._subscribe_for_others(handoff)\n",
       "            try:\n                pass\n", "tests/integration/test_handoff.py"),
    py("interrupted-subscription-closed-first", "an interrupted reader closes the process's "
       "subscription before it subscribes again for the other waiters (a release in between "
       "takes them for a dead process's: another process's later waiter goes first)",
       "_waiting",
       "            interrupted = self._take_subscription()\n"
       "            try:\n                self._subscribe_for_others(handoff)\n"
       "            finally:\n                _closed(interrupted)\n",
       "            _closed(self._take_subscription())\n"
       "            self._subscribe_for_others(handoff)\n",
       "tests/integration/test_handoff.py"),
    py("dead-statement-block-counted-for-a-pushed-exit", "a `with` statement's block whose "
       "task has ended is counted among the blocks a pushed exit may mean (a dropped task's "
       "async generator's, never closed, makes every later pushed exit raise)", "_ownership",
       "            if section.exit is None and not (section.at >= 0 and _owner_ended(section))\n",
       "            if section.exit is None\n", "tests/integration/test_handed_out_blocks.py"),
    py("dropped-subscription-others-wait-for-recheck", "an interrupted reader's dropped "
       "subscription takes the grants of readers let in with it, already read off the "
       "socket, and those waiters learn it only at their recheck", "_waiting",
       "                _closed(interrupted)\n            self._others_ask_server(handoff)\n",
       "                _closed(interrupted)\n", "tests/integration/test_handoff.py"),
    py("finalizer-aclose-taken-for-a-close", "an async generator closed by asyncio's "
       "finalizer (aclose() in a task of its own) is taken for a coroutine being closed: its "
       "release goes to the background, its lost lease unreported", "_ownership",
       "            return not (\n", "            return True or (\n",
       "tests/integration/test_stack_windows.py"),
    py("mixin-exit-not-hooked", "a mixin's exit (not the subclass's own) is left as it is",
       "_primitive",
       "            own = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), "
       "None)\n",
       "            own = cls.__dict__.get(name)\n", "tests/integration/test_stack_windows.py"),
    py("own-hook-of-any-object", "a primitive's own enter or exit is passed through when it "
       "enters or leaves another primitive by hand", "_ownership",
       "    return blocks is not None and getattr(obj, \"_blocks\", None) is blocks\n",
       "    return isinstance(getattr(obj, \"_blocks\", None), Blocks)\n",
       "tests/integration/test_stack_windows.py"),
    py("async-unexited-never-closed", "an asyncio object entered again never closes its "
       "blocks whose AsyncExitStack exit can never come", "_primitive",
       "                await guard.close_unexited_async(self._blocks, where)\n",
       "                pass\n", "tests/integration/test_stack_windows.py"),
    py("close-block-marked-as-try-begins", "close_block marks that it handled its exit as its "
       "try begins (a cut between the two gives up the outer block of the same object too)",
       "_guard",
       CLOSE_BLOCK_TRY,
       "    try:\n        if handled is not None:\n            handled.append(True)\n"
       + CLOSE_BLOCK_TRY[len("    try:\n"):].split("        if handled is not None:  #")[0]
       + "    except BaseException as exc:\n",
       "tests/integration/test_kept_interrupts.py"),
    py("close-block-unmarked-on-return", "close_block marks that it handled its exit only in "
       "its handler (a cut as it returns gives up the outer block of the same object too)",
       "_guard",
       "        close_section(section, error)\n        if handled is not None:  # (closed: a cut "
       "as this returns must not give up another)\n            handled.append(True)\n",
       "        close_section(section, error)\n", "tests/integration/test_kept_interrupts.py"),
    py("inherited-pool-locks-kept", "a forked child keeps the locks of its parent's pools "
       "(one a parent's thread held at the fork hangs the child's clean-up)", "_pools",
       "                setattr(pool, name, made())\n",
       "                pass\n", "tests/integration/test_fork_locks.py"),
    py("lanes-help-quick-calls", "renewal lanes start helper threads whatever the time calls "
       "take", "_worker",
       "            and (self._last > SLOW or time.monotonic() - self._since > SLOW)\n", "",
       "tests/core/test_serial_worker.py"),
    py("retired-master-starves-rounds", "a retired quorum master hands back at once the "
       "connection made for the round waiting for it", "_fanout",
       "            self.ready.append(checkout(self.pool, []))\n",
       "            self.give(checkout(self.pool, []))\n", "tests/integration/test_quorum.py"),
    py("cut-drain-keeps-cache", "a cache drain cut between the socket's recv and the "
       "buffer's write leaves the cache as it is (the invalidation received is lost)", "_pools",
       "            cache = _cache_around(self)\n            if cache is not None:\n"
       "                cache.flush()\n            raise\n\n    def _before_use",
       "            raise\n\n    def _before_use", "tests/integration/test_connect_interrupts.py"),
    py("stale-handshake-flag-trusted", "a single connection's handshake flag left set by a "
       "connect cut as its finally began is trusted: the close of a connection owing a reply "
       "never fires again", "_pools",
       "        self._connecting = False\n        return False\n", "        return True\n",
       "tests/integration/test_connect_interrupts.py"),
    py("async-handshake-flag-trusted", "an asyncio single connection's handshake flag is "
       "trusted unconfirmed (left set by a cut connect: never closed owing a reply again)",
       "_pools",
       "        if self._stale or (self._single and self._owed and not self._handshaking()):",
       "        if self._stale or (self._single and self._owed and not self._connecting):",
       "tests/integration/test_connect_interrupts.py"),
    py("async-handshake-unconfirmed", "an asyncio connect's frame does not confirm its "
       "handshake flag (a single connection closed amid its own handshake)", "_pools",
       "    for kind in (WholeConnect, WholeAsyncConnect)\n", "    for kind in (WholeConnect,)\n",
       "tests/integration/test_connect_interrupts.py", "tests/integration/test_reply_search.py"),
    py("missed-unmade-at-checkout", "a connection the guard's look missed (made from the "
       "class before its, or moving between the pool's lists) is handed out as it is",
       "_pools", "            counted = made_whole(connection, WholeConnect, idle=True)\n",
       "            counted = counting(connection)\n",
       "tests/integration/test_connect_interrupts.py"),
    py("unknown-unsettled-at-checkout", "a connection the guard marked as checked out, given "
       "back through a release begun before the guard, is handed out with its mark unsettled "
       "(never closed, owing what nobody counted)", "_pools",
       "                counted._unknown = False\n                _mark_uncounted(counted, "
       "idle=True)\n", "                pass\n",
       "tests/integration/test_connect_interrupts.py"),
    py("guard-unlocked", "guard() looks at a pool's lists without the lock the pool moves its "
       "connections under", "_pools", "    with _moves_of(pool, asynchronous):",
       "    with contextlib.nullcontext():", "tests/integration/test_connect_interrupts.py"),
    py("forked-pool-lock-taken", "a forked child's guard takes its pool's lock before "
       "redis-py has reset the pool (a lock a parent's thread held at the fork)", "_pools",
       '    if asynchronous or getattr(pool, "pid", None) != os.getpid():',
       "    if asynchronous:", "tests/integration/test_direct_writes.py"),
    py("forked-single-shared", "a single-connection client's one connection is used by a "
       "forked child as it is (the parent's socket)", "_pools",
       '        if getattr(self, "pid", None) != os.getpid():', "        if False:",
       "tests/integration/test_direct_writes.py"),
    py("wait-timeout-raised", "a replicated attempt's WAIT reply later than the socket's "
       "timeout raises TimeoutError (not: no copy, tried again)", "_drivers",
       "    return contextlib.suppress(RedisTimeoutError)",
       "    return contextlib.nullcontext()", "tests/integration/test_topologies.py"),
    py("wait-past-socket-timeout", "WAIT is given its full timeout whatever the connection's "
       "socket timeout", "_protocol",
       "        if socket_timeout:\n            room =",
       "        if False:\n            room =", "tests/integration/test_topologies.py"),
    py("replicated-redirect-raised", "a replicated cluster attempt's MOVED / ASK reaches the "
       "caller", "_drivers",
       "                # The replicated attempt's own connection to the key's node",
       "                raise\n                # The replicated attempt's own connection",
       "tests/integration/test_topologies.py"),
    py("sync-single-closed-in-handshake", "a sync single-connection client's connection "
       "written on owing a reply inside its own handshake is closed", "_pools",
       "        if self._single and self._owed and not self._handshaking():",
       "        if self._single and self._owed:",
       "tests/integration/test_connect_interrupts.py"),
    py("async-single-trusts-unknown", "an asyncio single-connection client's connection made "
       "whole while it was the client's is trusted to owe nothing", "_pools",
       "                connection._stale = True\n            connection._single = True\n",
       "                pass\n            connection._single = True\n",
       "tests/integration/test_connect_interrupts.py"),
    py("single-mark-outlives-client", "an asyncio connection keeps its single-connection mark "
       "when its client gives it back to a pool", "_pools",
       "            connection._single = False\n", "            pass\n",
       "tests/integration/test_connect_interrupts.py"),
    py("single-made-unmarked", "an asyncio single-connection client's connection made by the "
       "library's first command goes unmarked until its next", "_pools",
       "        await client.initialize()  #", "        pass  #",
       "tests/integration/test_connect_interrupts.py"),
    py("single-marked-amid-a-command", "an asyncio single-connection client's connection is "
       "marked without its lock, amid another task's command (its connect's handshake)",
       "_pools", "    async with client._single_conn_lock:\n",
       "    async with contextlib.AsyncExitStack():\n",
       "tests/integration/test_connect_interrupts.py"),
    py("unfit-closed-quietly", "a connection whose read was cut short is closed and connected "
       "again quietly at its next use (a WATCH on it is dropped)", "_pools",
       "            raise redis.ConnectionError(", "            return None and (",
       "tests/integration/test_connect_interrupts.py"),
    py("close-keeps-cache", "closing a connection inside a client-side caching proxy leaves "
       "the cache as it is", "_pools",
       "        if cache is not None:\n            cache.flush()\n", "",
       "tests/integration/test_connect_interrupts.py",
       equivalent=before_8_2(
           "OPEN, a gap: no test tells it apart (CI's rotating sample, 2026-12-05; it survives "
           "at d7ed07a too); whether 8.1 and older kill it is not checked"
       )),
    py("cache-proxy-uncounted", "a connection inside redis-py's client-side caching proxy is "
       "never marked owing a reply", "_pools",
       "    return inner if isinstance(inner, WholeConnect) else None\n", "    return None\n",
       "tests/integration/test_connect_interrupts.py"),
    py("stale-read-before-close", "a stale connection is read (redis-py's cache drains it for "
       "invalidations) before it is closed", "_pools",
       "        self._before_use()\n        try:\n            return bool(",
       "        self._refuse_if_unfit()\n"
       "        if self._single and self._owed and not self._connecting:\n"
       "            self.disconnect()\n        try:\n            return bool(",
       "tests/integration/test_reply_search.py",
       equivalent=before_8_2(
           "OPEN, a gap: the reply search did not kill it in CI's rotating sample on "
           "2026-12-05 (16 passed in 477 s); not checked on the code before this session, "
           "nor on 8.1 and older"
       )),
    py("cache-not-sent-around", "the library's commands and subscription on a client-side "
       "caching client go through the cache's proxies", "_pools",
       "    return redis.Redis(connection_pool=uncached_pool(pool, sized=True))\n",
       "    return None\n",
       "tests/integration/test_connect_interrupts.py"),
    py("cached-subscription-through-proxy", "the grant subscription of a client-side caching "
       "client not sent around the cache goes through the cache's proxy", "_waiting",
       "    if not cached(client) and not (beside and fills_up(pool)):\n", "    if True:\n",
       "tests/integration/test_connect_interrupts.py"),
    py("wrapped-client-sent-around", "a client-side caching client wrapped on the instance is "
       "sent around the cache too: its wrapper never sees the library's commands", "_pools",
       " or \"execute_command\" in vars(client):", ":",
       "tests/integration/test_connect_interrupts.py"),
    py("cache-proxy-made-whole", "guard() makes a client-side caching proxy whole, not the "
       "connection inside it", "_pools",
       "    connection = _wrapped(connection)\n    if isinstance(connection, mixin):",
       "    if isinstance(connection, mixin):",
       "tests/integration/test_connect_interrupts.py"),
    py("never-confirmed-kept", "a grant subscription that is never confirmed is kept",
       "_waiting", "    return time.monotonic() - since > UNCONFIRMED",
       "    return False", "tests/integration/test_first_wait.py"),
    py("migration-impatient", "a step refused while its cluster slot migrates fails at once",
       "_drivers",
       "        send = self._send_patiently if self.cluster and _patient.get() else self._send\n"
       "        if self.lanes is None:\n            return send(step)",
       "        send = self._send\n        if self.lanes is None:\n            return send(step)",
       "tests/integration/test_topologies.py"),
    py("renewal-patient", "a renewal refused while its slot migrates is sent again for 2 s, "
       "holding up the other renewals", "_renewal",
       "                with drivers.impatient():  # (see there)\n"
       "                    outcome = drivers.run(steps, job.target)",
       "                with contextlib.nullcontext():\n"
       "                    outcome = drivers.run(steps, job.target)",
       "tests/integration/test_topologies.py"),
    py("throttle-interrupt-keeps-slot", "a sync throttle call interrupted while its request "
       "is out keeps the slot the request took", "_throttle",
       "if not isinstance(exc, Exception) and (answer is None or answer.admitted):",
       "if not isinstance(exc, Exception) and answer is not None and answer.admitted:",
       "tests/integration/test_throttle.py"),
    # -- the throttle (lua/throttle_*.lua; its own seeded schedules: simulation/throttle.py) --
    lua("throttle-retry-counts-twice", "a re-sent admit is judged as a new call",
        "throttle_admit.lua", "if token == ARGV[1] then", "if false then",
        scenario="throttle"),
    lua("throttle-past-wait", "a slot beyond the caller's wait is reserved anyway",
        "throttle_admit.lua", "if delay > tonumber(ARGV[4]) then", "if false then",
        scenario="throttle"),
    lua("throttle-one-interval-early", "a waiting call's slot comes one interval early",
        "throttle_admit.lua", "math.ceil(due - capacity - now))",
        "math.ceil(due - capacity - now - tonumber(ARGV[5])))", scenario="throttle"),
    lua("throttle-idle-credit", "a quiet spell saves up more than the burst",
        "throttle_admit.lua", "if tat < now then\n  tat = now\nend", "", scenario="throttle"),
    lua("throttle-expires-early", "the key expires before its arrival time has passed",
        "throttle_admit.lua", "'PX', math.ceil((due - now) / 1000) + 1",
        "'PX', math.ceil((due - now) / 2000)", scenario="throttle"),
    lua("throttle-absolute-time", "the arrival time kept in absolute microseconds (a double's "
        "step there is 0.25 us: sums drift)", "throttle_admit.lua",
        "base = base or now", "base = 0", scenario="throttle"),
    lua("throttle-overwrites-foreign", "a string that is no throttle's state is overwritten",
        "throttle_admit.lua", "  if not token then\n    return {2, 0}\n  end\n", "",
        scenario="throttle"),
    lua("throttle-return-any", "a give-back undoes a reservation others reserved after",
        "throttle_return.lua", "if token ~= ARGV[1] then", "if false then",
        scenario="throttle"),
    lua("throttle-return-twice", "a re-sent give-back gives back twice",
        "throttle_return.lua", "'gcra %.17g %s - %s'", "'gcra %.17g %s ' .. token .. ' %s'",
        scenario="throttle"),
)  # fmt: skip


# The first seed (of range(20_000)) that kills each simulator mutant, as last recorded
# (``--hints`` prints them anew). A hint only orders the seeds: it is run like any other, and
# a mutant whose hint no longer kills it (the plan generator or the code changed) is searched
# for over every seed as before -- CI's sample then fails, asking for the table to be re-recorded
# (a search over thousands of seeds would not fit its time).
SEED_HINTS: dict[str, int] = {
    "lua:queue-no-expiry": 0,
    "lua:moving-refusal-raised": 51,
    "lua:moving-write-refusal-raised": 51,
    "lua:moving-grant-told-unwritten": 807,
    "lua:queue-join-moves-back": 7,
    "lua:grant-constant-lease": 2,
    "lua:reader-grant-constant-lease": 5,
    "lua:sem-grant-constant-lease": 0,
    "lua:sem-serve-without-limit": 29,
    "lua:sem-serve-releasers-limit": 29,
    "lua:publish-count-ignored": 222,
    "lua:queued-writer-ignored": 5,
    "lua:shared-key-short": 5,
    "lua:numsub-ignored": 834,
    "lua:acquire-without-nx": 2,
    "lua:own-token-unseen": 62,
    "lua:free-lock-taken-past-queue": 392,
    "lua:sem-no-sweep": 383,
    "lua:sem-over-admit": 0,
    "lua:sem-admitted-uncounted": 268,
    "lua:sem-newcomer-passes-queue": 65,
    "lua:sem-key-not-extended": 0,
    "lua:readers-pass-queued-writer": 5,
    "lua:reader-over-writer": 8,
    "lua:release-without-token-check": 4,
    "lua:release-without-handoff": 2,
    "lua:release-deletes-the-grantees-key": 2,
    "lua:release-keeps-its-key": 36,
    "lua:leaving-stays-queued": 4,
    "lua:release-of-gone-is-released": 19,
    "lua:sem-release-without-handoff": 0,
    "lua:ended-slot-released": 75,
    "lua:shared-release-without-handoff": 5,
    "lua:extend-without-token-check": 5,
    "lua:sem-extend-ended": 193,
    "lua:shared-extend-key-unsettled": 5,
    "py:fresh-always": 0,
    "py:fresh-fraction-2": 0,
    "lua:retried-join-stays-queued": 5651,
    "py:handoff-measured-from-receipt": 2,
    "py:give-up-stays-queued": 4,
    "py:no-recheck": 29,
    "py:release-gone-is-released": 10,
    "py:extend-always-ok": 7,
    "py:entry-format-drift": 4,
    "py:no-again-after-wait": 2580,
    "py:renewal-loss-silent": 7,
    "py:renewal-records-double": 0,
    "py:renew-at-the-end": 4,
    "py:renewed-from-the-reply": 1,
    "py:released-always-kept": 10,
    "py:no-give-back": 694,
    "py:give-back-any-grant": 318,
    "py:never-presumed-lost": 9767,
    "py:plain-give-up-keeps-lease": 265,
    "py:fresh-measured-when-read": 8335,
}


def hint(mutant: Mutant) -> tuple[int, ...]:
    seed = SEED_HINTS.get(mutant.name)
    return () if seed is None else (seed,)


def by_name() -> dict[str, Mutant]:
    return {m.name: m for m in MUTANTS}


def source_of(mutant: Mutant) -> str:
    if mutant.lua:
        return (PACKAGE / "lua" / mutant.where).read_text("utf-8")
    return (PACKAGE / f"{mutant.where}.py").read_text("utf-8")


def stale(mutant: Mutant) -> str | None:
    """Why the mutant cannot apply to the code as it is now, or None."""
    if mutant.pair(source_of(mutant)) is None:
        found = source_of(mutant).count(mutant.old)
        return f"its text occurs {found} times in {mutant.where} (expected once)"
    return None


# -- in the child ------------------------------------------------------------------------------


def apply_python(mutant: Mutant) -> None:
    """Run the module's source again, mutated, in its own namespace, and rebind every
    ``from <module> import name`` of the package (and of the simulator) to the new objects."""
    module = importlib.import_module(f"redlock_deco.{mutant.where}")
    path = module.__file__
    assert path is not None
    source = Path(path).read_text("utf-8")
    pair = mutant.pair(source)
    assert pair is not None
    before = dict(vars(module))
    exec(compile(source.replace(*pair), path, "exec"), vars(module))
    replaced = {
        id(old): vars(module)[name]
        for name, old in before.items()
        if name in vars(module) and vars(module)[name] is not old and not name.startswith("__")
    }
    for other in list(sys.modules.values()):
        name = getattr(other, "__name__", "")
        if other is module or not (name.startswith("redlock_deco") or "simulation" in name):
            continue
        for attr, value in list(vars(other).items()):
            new = replaced.get(id(value))
            if new is not None:
                setattr(other, attr, new)


def run_simulator(
    mutant: Mutant | None,
    seeds: int,
    skip: frozenset[str],
    known: frozenset[str],
    first: tuple[int, ...] = (),
    regression: str = "",
) -> dict[str, Any]:
    """``first``: seeds run before ``range(seeds)`` (a recorded hint: it is run like any other
    seed, and only a broken invariant there counts as a kill). ``regression``: run that fixed
    finding's pinned plan (:mod:`.regressions`) first."""
    from . import runner
    from .world import Options

    transform = None
    if mutant is not None and mutant.lua:
        transform = transform_of(mutant)
    elif mutant is not None:
        apply_python(mutant)
    options = Options(transform=transform, skip=skip, known=known)
    started = time.perf_counter()
    if regression:
        from .regressions import PLANS

        pinned = runner.run_plan(PLANS[regression], options)
        if pinned.failed:
            assert pinned.violation is not None
            return {"seeds": 0, "wall": time.perf_counter() - started, "killed": True,
                    "by": pinned.violation.check, "seed": f"plan {regression}",
                    "message": pinned.violation.message}  # fmt: skip
    order = itertools.chain(first, (seed for seed in range(seeds) if seed not in first))
    summary = runner.run_many(order, options, stop_after=1)
    result: dict[str, Any] = {"seeds": summary.seeds, "wall": time.perf_counter() - started}
    if summary.failures:
        failure = summary.failures[0]
        assert failure.violation is not None
        result.update(
            killed=True,
            by=failure.violation.check,
            seed=failure.plan.seed,
            message=failure.violation.message,
        )
    else:
        result.update(killed=False)
    return result


def transform_of(mutant: Mutant) -> Callable[[str], str]:
    """The script text rewrite of a Lua mutant (the store applies it as it loads a script)."""
    pair = mutant.pair(source_of(mutant))
    assert pair is not None and mutant.lua
    old, new = pair
    return lambda text: text.replace(old, new)


def run_scenario(mutant: Mutant) -> dict[str, Any]:
    """The mutant's directed scenario (:mod:`.scenarios`), on the mutated scripts."""
    from .scenarios import SCENARIOS

    started = time.perf_counter()
    result: dict[str, Any] = {"seeds": 0}
    try:
        SCENARIOS[mutant.scenario](transform_of(mutant))
    except AssertionError as exc:
        result.update(killed=True, by=f"scenario {mutant.scenario}", seed=None,
                      message=str(exc)[:200])  # fmt: skip
    else:
        result.update(killed=False, message=f"scenario {mutant.scenario} passes")
    result["wall"] = time.perf_counter() - started
    return result


def run_tests(mutant: Mutant) -> dict[str, Any]:
    """The named test files on a copy of the repository whose module is mutated."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="redlock-deco-mutant-") as tmp:
        copy = Path(tmp)
        ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "simulation")
        shutil.copytree(PACKAGE, copy / "redlock_deco", ignore=ignore)
        shutil.copytree(ROOT / "tests", copy / "tests", ignore=ignore)
        shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
        package = copy / "redlock_deco"
        target = package / "lua" / mutant.where if mutant.lua else package / f"{mutant.where}.py"
        source = target.read_text("utf-8")
        pair = mutant.pair(source)
        assert pair is not None
        target.write_text(source.replace(*pair), "utf-8")
        env = {**os.environ, "PYTHONPATH": str(copy)}
        # A test file moved within tests/ is found by its name.
        files = []
        for name in mutant.tests:
            found = next((copy / "tests").rglob(Path(name).name), None)
            moved = not (copy / name).exists() and found is not None
            files.append(str(found.relative_to(copy)) if moved and found else name)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    last = (done.stdout.strip().splitlines() or [""])[-1]
    result: dict[str, Any] = {"wall": time.perf_counter() - started, "seeds": 0}
    if done.returncode == 1:
        failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
        result.update(killed=True, by=" ".join(mutant.tests), seed=None,
                      message=(failed[0] if failed else last)[:200])  # fmt: skip
    elif done.returncode == 0:
        result.update(killed=False, message=last)
    else:
        result.update(killed=False, error=f"pytest exited {done.returncode}: {last}")
    return result


def child(
    name: str,
    seeds: int,
    skip: frozenset[str],
    known: frozenset[str],
    first: tuple[int, ...] = (),
    regression: str = "",
) -> dict[str, Any]:
    if name == "baseline":
        return run_simulator(None, seeds, skip, known)
    mutant = by_name()[name]
    problem = stale(mutant)
    if problem is not None:
        return {"killed": False, "stale": problem, "seeds": 0, "wall": 0.0}
    if mutant.tests:
        return run_tests(mutant)
    if mutant.scenario:
        return run_scenario(mutant)
    return run_simulator(mutant, seeds, skip, known, first, regression)


# -- in the parent -----------------------------------------------------------------------------


def spawn(
    name: str,
    seeds: int,
    skip: frozenset[str],
    known: frozenset[str] = frozenset(),
    first: tuple[int, ...] = (),
    regression: str = "",
) -> dict[str, Any]:
    """Run one mutant in a child process; ``first``: seeds to try before ``range(seeds)``;
    ``regression``: a fixed finding whose pinned plan to try before them."""
    command = [sys.executable, "-m", "tests.simulation.mutants", "--one", name,
               "--seeds", str(seeds), "--skip", ",".join(sorted(skip)),
               "--known", ",".join(sorted(known)),
               "--first", ",".join(map(str, first)), "--regression", regression]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"killed": False, "error": f"child failed: {tail}", "seeds": 0, "wall": 0.0}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def table(results: list[tuple[Mutant, dict[str, Any]]]) -> str:
    rows = [("mutant", "killed?", "by (check or tests)", "seed", "what")]
    for mutant, result in results:
        if "stale" in result:
            verdict, by = "STALE", result["stale"]
        elif not result.get("killed") and mutant.equivalent and "error" not in result:
            verdict, by = "equivalent", f"{result['seeds']} schedules passed (see below)"
        elif "error" in result:
            verdict, by = "ERROR", result["error"]
        elif result["killed"]:
            verdict, by = "killed", str(result["by"])
        else:
            verdict, by = "SURVIVED", f"{result['seeds']} schedules passed"
        seed = "" if result.get("seed") is None else str(result["seed"])
        rows.append((mutant.name, verdict, by, seed, mutant.what))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        cells = [row[c].ljust(widths[c]) for c in range(4)]
        lines.append("  ".join([*cells, row[4]]))
        if i == 0:
            lines.append("  ".join("-" * w for w in [*widths, 4]))
    for mutant, result in results:
        if mutant.equivalent and not result.get("killed"):
            lines.append(f"  {mutant.name}: {mutant.equivalent}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.simulation.mutants",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seeds", type=int, default=20_000, help="schedules per mutant (max)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    parser.add_argument("--only", default="", help="comma-separated mutant names")
    parser.add_argument("--skip", default="", help="checks the simulator leaves out")
    parser.add_argument("--known", default="", help="checks failing on the code as it is "
                        "(a schedule that fails one ends there, uncounted)")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the mutants")
    parser.add_argument("--hints", action="store_true", help="try each mutant's recorded "
                        "killing seed (SEED_HINTS) first; print new hints")  # fmt: skip
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--first", default="", help=argparse.SUPPRESS)
    parser.add_argument("--regression", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    skip = frozenset(s for s in args.skip.split(",") if s)
    known = frozenset(s for s in args.known.split(",") if s)
    if args.one:
        first = tuple(int(s) for s in args.first.split(",") if s)
        print(json.dumps(child(args.one, args.seeds, skip, known, first, args.regression)))
        return 0
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only.split(",")]
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name:36} {mutant.where:18} {mutant.what}")
        return 0
    print(f"baseline: the unmutated code over {args.seeds:,} schedules ...", flush=True)
    base = spawn("baseline", args.seeds, skip, known)
    if "error" in base or base.get("killed"):
        print(f"the unmutated code fails ({base}): fix that first (or --skip the check)")
        return 2
    print(f"  passes ({base['wall']:.0f}s); {len(chosen)} mutants:", flush=True)
    started = time.perf_counter()
    results: list[tuple[Mutant, dict[str, Any]]] = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            (m, pool.submit(spawn, m.name, args.seeds, skip, known, hint(m) if args.hints else ()))
            for m in chosen
        ]
        for mutant, future in futures:
            result = future.result()
            results.append((mutant, result))
            verdict = "killed" if result.get("killed") else "NOT KILLED"
            print(f"  {mutant.name}: {verdict} ({result.get('wall', 0):.1f}s)", flush=True)
    print()
    print(table(results))
    survivors = [m.name for m, r in results if not r.get("killed") and not m.equivalent]
    print(f"\n{len(results) - len(survivors)}/{len(results)} killed in "
          f"{time.perf_counter() - started:.0f}s"
          + (f"; not killed: {', '.join(survivors)}" if survivors else ""))  # fmt: skip
    found = {m.name: r["seed"] for m, r in results if r.get("killed") and r.get("seed") is not None}
    if any(SEED_HINTS.get(name) != seed for name, seed in found.items()):
        print("\nkilling seeds (SEED_HINTS):")
        for name, seed in found.items():
            print(f"    {name!r}: {seed},")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
