"""The words generated sessions are made of: fixed text banks, combined by the caller's rng."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

# ---------------------------------------------------------------------------------------------
# Text banks: fixed data, combined by the caller's rng.

TOPICS = (
    ("nginx", "web-01"),
    ("postgres", "db-02"),
    ("the backup job", "nas"),
    ("redis", "cache-1"),
    ("the blog build", "ci"),
    ("docker compose", "homelab"),
)
CITIES = ("Berlin", "Lisbon", "Tokyo", "Toronto", "Nairobi", "Austin")
USER_EN = (
    "Can you check why {svc} keeps failing on {host}?",
    "Summarise the last {n} commits in the repo please.",
    "What's the weather going to be like in {city} tomorrow?",
    "Remind me to renew the domain at {h}:30.",
    "Write a Python function that {fn}.",
    "How do I {howto}?",
    "Look through ~/notes and tell me what I planned for {city}.",
    "Can you search for the latest release notes of {svc}?",
    "Why is {svc} on {host} using so much memory?",
    "Draft a short reply to Sam saying the {svc} migration slips to Friday.",
    "ok",
    "thanks!",
    "go on",
    "perfect, ship it",
    "hmm, that didn't work. same error as before",
)
FUNCS = (
    "parses ISO dates with timezones",
    "deduplicates a list while keeping order",
    "retries an HTTP call with exponential backoff",
    "reads a CSV and sums one column",
)
HOWTOS = (
    "rotate the nginx logs weekly",
    "undo the last git commit but keep my changes",
    "mount the NAS share at boot",
    "see which process holds port 8080",
)
USER_ZH = (
    "帮我总结一下今天的会议记录。",
    "明天东京的天气怎么样？",
    "把这段代码改成异步的，谢谢。",
    "提醒我下午三点给妈妈打电话。",
    "解释一下什么是向量数据库，越简单越好。",
    "这个报错是什么意思：ConnectionResetError: [Errno 104]",
    "帮我查一下 {svc} 为什么在 {host} 上一直重启。",
    "好的，继续。",
    "谢谢！",
)
ASSISTANT_EN = (
    "I checked the service status and the unit restarted three times in the last hour.",
    "The logs show a permission error when it tries to open the socket.",
    "Here is a short summary of what changed.",
    "The most likely cause is the expired certificate on the upstream.",
    "You can fix this by adding the user to the docker group and logging in again.",
    "I have updated the configuration and reloaded the service; it is healthy now.",
    "Tomorrow looks mild with light rain in the afternoon, so take an umbrella.",
    "I set the reminder and will message you when it is due.",
    "Three of the commits touch the scheduler, the rest are documentation fixes.",
    "Memory grows because the worker cache has no upper bound.",
    "If you want, I can also add a health check so this is caught earlier.",
    "That error usually means the remote side closed the connection before replying.",
    "I could not find a newer release than the one you are running.",
    "Let me know if you want the longer version with every step.",
    "Done — the draft is below, feel free to tweak the tone.",
    "The backup finished, but it skipped two folders because the disk was full.",
)
ASSISTANT_ZH = (
    "我查看了服务状态，过去一小时内它重启了三次。",
    "日志显示在打开套接字时出现了权限错误。",
    "下面是今天会议的简要总结。",
    "向量数据库把文本转换成向量，然后按相似度检索。",
    "提醒已经设置好了，到时间我会通知你。",
    "明天东京多云，最高气温十八度，下午可能有小雨。",
    "这个错误通常表示对方在回复之前关闭了连接。",
    "我已经把函数改成了异步版本，并补充了错误处理。",
    "如果需要，我还可以帮你加上健康检查。",
)
PREFACES_EN = (
    "Let me check.",
    "I'll look at the logs first.",
    "Searching now.",
    "One moment, reading the file.",
)
PREFACES_ZH = ("我先看一下。", "稍等，我查一下日志。")
REASONING = (
    "The user wants a quick answer, so I should check the service state before anything else.",
    "I need the recent logs; listing the directory first tells me which file is current.",
    "The error mentions a socket, so permissions or a stale pid file are likely.",
    "A web search is needed because my knowledge of this release may be outdated.",
    "I should keep the reply short and offer the detailed steps only if asked.",
    "用户需要中文回答，我应该先确认问题再给出步骤。",
)
TITLES_EN = (
    "Fixing nginx restarts",
    "Weekly git summary",
    "Trip planning for Lisbon",
    "Backup job disk space",
    "Python retry helper",
)
TITLES_ZH = ("会议记录总结", "东京天气", "异步代码改写", "向量数据库入门")
DELIVERIES = (
    "⏰ Reminder: renew the domain today.",
    "Good morning! Today: 2 meetings, rain after 3 pm.",
    "The nightly backup finished: 14.2 GB, no errors.",
    "Heads-up: disk usage on nas is at 91%.",
    "⏰ 提醒：下午三点给妈妈打电话。",
    "Your package was delivered at 10:42.",
)
COMMANDS = ("/status", "/help", "/model", "/history")
MODELS = ("anthropic/claude-sonnet-4", "openai/gpt-4.1", "deepseek/deepseek-chat")
SNIPPETS = (
    (
        "python",
        "import time\n\n\ndef retry(call, attempts=5, base=0.5):\n"
        "    for i in range(attempts):\n        try:\n            return call()\n"
        "        except OSError:\n            time.sleep(base * 2**i)\n"
        "    raise RuntimeError('gave up')",
    ),
    (
        "bash",
        "sudo systemctl status nginx --no-pager\nsudo journalctl -u nginx -n 50\n"
        "sudo nginx -t && sudo systemctl reload nginx",
    ),
    (
        "python",
        "def dedupe(items):\n    seen = set()\n    return [x for x in items if not (x in seen or seen.add(x))]",
    ),
    (
        "sql",
        "SELECT pid, state, query_start, left(query, 60)\nFROM pg_stat_activity\n"
        "WHERE state <> 'idle'\nORDER BY query_start;",
    ),
    (
        "javascript",
        "async function fetchJson(url) {\n  const res = await fetch(url);\n"
        "  if (!res.ok) throw new Error(`HTTP ${res.status}`);\n  return res.json();\n}",
    ),
)
TOOL_NAMES = (
    "read_file",
    "list_dir",
    "exec",
    "web_search",
    "web_fetch",
    "write_file",
    "edit_file",
    "grep",
    "cron",
    "message",
)
PATHS = (
    "/home/u/project/src/app.py",
    "/home/u/project/README.md",
    "/etc/nginx/nginx.conf",
    "/home/u/notes/trip.md",
    "/home/u/.nanobot/workspace/memory/MEMORY.md",
)
SHELL = (
    "git log --oneline -n 20",
    "systemctl status nginx --no-pager",
    "df -h",
    "journalctl -u backup -n 80 --no-pager",
    "ps aux --sort=-%mem | head",
)
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True)
class _Pool:
    """A long text and its line start offsets, so slicing N lines costs one string slice."""

    text: str
    starts: tuple[int, ...]

    def lines(self, rng: random.Random, n: int) -> str:
        n = max(1, min(n, len(self.starts) - 1))
        i = rng.randrange(len(self.starts) - n)
        return self.text[self.starts[i] : self.starts[i + n] - 1]


def _pool(lines: list[str]) -> _Pool:
    text = "\n".join(lines) + "\n"
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    return _Pool(text, tuple(starts))


@lru_cache(maxsize=1)
def pools() -> dict[str, _Pool]:
    """Long tool outputs (listings, code, logs, pages, search hits), built once from a fixed seed."""
    r = random.Random(7)
    dirs = ("src", "tests", "docs", "scripts", "assets", "config", "build", "notes")
    stems = ("app", "main", "utils", "models", "server", "cli", "config", "index", "report")
    exts = (".py", ".md", ".json", ".ts", ".yaml", ".txt", ".sh")
    listing = []
    for i in range(700):
        if r.random() < 0.2:
            listing.append(f"📁 {r.choice(dirs)}{i % 7 or ''}")
        else:
            size = r.randint(120, 90_000)
            listing.append(f"📄 {r.choice(stems)}_{i}{r.choice(exts)}  ({size:,} bytes)")
    code = []
    for i in range(40):
        for snippet_line in SNIPPETS[i % len(SNIPPETS)][1].splitlines():
            code.append(snippet_line.replace("retry", f"retry_{i}"))
        code.append("")
    logs = []
    for i in range(600):
        ts = f"Nov {1 + i // 40:02d} {i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}"
        sha = "".join(r.choice("0123456789abcdef") for _ in range(7))
        if r.random() < 0.5:
            logs.append(f"{sha} {r.choice(ASSISTANT_EN)[:60]}")
        else:
            unit = r.choice(("nginx", "backup", "postgres", "sshd"))
            logs.append(f"{ts} web-01 {unit}[{r.randint(300, 9999)}]: {r.choice(REASONING)}")
    page = [r.choice(ASSISTANT_EN) + " " + r.choice(ASSISTANT_EN) for _ in range(400)]
    hits = []
    for i in range(300):
        hits.append(f"{i % 10 + 1}. {r.choice(TITLES_EN)} - https://example.org/post/{i}")
        hits.append(f"   {r.choice(ASSISTANT_EN)}")
    return {
        "listing": _pool(listing),
        "code": _pool(code),
        "logs": _pool(logs),
        "page": _pool(page),
        "hits": _pool(hits),
    }
