"""Conversations with planted facts, and the two summarizers measured on them (issue 19).

Each generated conversation plants one fact of every kind the summary prompt promises to keep
(a budget, a date, a count, a prohibition, an id, a name, a path) among chit-chat, followed by
a fact-free recent tail longer than compaction keeps, so every fact lies in the part that is
summarized. Conversations alternate English and Chinese. A fact is kept when the summary holds
one of its accepted spellings (a prohibition: its item on a line that also negates it).

The summarizers, on the same chat model and conversation:
- ours: the guard's `SummaryCompactor` (the product's prompt, chunking, cap and shortening
  pass) over the local model's profile budget, through `ModelSummarizer`;
- LangChain's: `SummarizationMiddleware` with its default prompt, keeping the same tail ours
  kept, so both summarize the same messages.

Used by `bench.bench_summary_facts` and `tests/chat_shell/compaction/test_summary_facts.py`.
"""

from __future__ import annotations

import itertools
import random
import re
import time
from dataclasses import dataclass, replace
from typing import Literal

from langchain.agents.middleware.summarization import SummarizationMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from chat_shell.accounting.budget import Budget, budget_for
from chat_shell.accounting.calibration import Fit, estimate
from chat_shell.accounting.token_counter import REPLY_PRIMING, TokenCounter
from chat_shell.guard.protocol import EventSink
from chat_shell.guard.stages.summary_compaction.compactor import SummaryCompactor
from chat_shell.guard.stages.summary_compaction.request import SummaryRequest
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.languages import cjk_language
from chat_shell.providers.openai import ProviderConfig, create_chat_model
from chat_shell.providers.profiles import LOCAL_MODEL_NAME, ModelProfile, resolve_profile
from chat_shell.providers.summarizer import ModelSummarizer

Language = Literal["en", "zh"]
Kind = Literal["budget", "date", "count", "prohibition", "id", "name", "path"]
KINDS: tuple[Kind, ...] = ("budget", "date", "count", "prohibition", "id", "name", "path")

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September")
_NEGATIONS = {
    "en": (
        "no ",
        "not",
        "never",
        "avoid",
        "without",
        "exclud",
        "forbid",
        "prohibit",
        "ban",
        "allerg",
        "free",
    ),
    "zh": ("不", "禁", "避免", "勿", "别", "无", "忌", "过敏"),
}
_ITEMS = {
    "en": ("peanuts", "shellfish", "sesame", "alcohol", "pork"),
    "zh": ("花生", "贝类", "芝麻", "酒精", "猪肉"),
}
_NAMES = {
    "en": (("Marta", "Kowalczyk"), ("Tobias", "Lindqvist"), ("Aiyana", "Redcloud"), ("Priya", "Raghunathan")),
    "zh": (("林", "晓雯"), ("欧阳", "志远"), ("诸葛", "明轩"), ("司马", "若兰")),
}


@dataclass(frozen=True)
class Fact:
    kind: Kind
    # As planted in the conversation.
    value: str
    # Spellings that count as the fact kept (the planted one first).
    forms: tuple[str, ...]
    language: Language

    def kept_in(self, summary: str) -> bool:
        if self.kind == "prohibition":
            negations = _NEGATIONS[self.language] + _NEGATIONS["en"]
            return any(
                any(form.lower() in line.lower() for form in self.forms)
                and any(n in line.lower() for n in negations)
                for line in summary.splitlines()
            )
        if self.kind in ("count", "budget"):
            # A number counts only as a whole number, not as digits of another one.
            return any(re.search(rf"(?<![\d,.]){re.escape(f)}(?![\d,])", summary) for f in self.forms)
        return any(form.lower() in summary.lower() for form in self.forms)


@dataclass(frozen=True)
class Conversation:
    language: Language
    messages: list[BaseMessage]
    facts: list[Fact]


def _facts(rng: random.Random, language: Language) -> dict[Kind, Fact]:
    amount = rng.randrange(2_100, 9_800, 50)
    month, day = rng.randrange(1, 10), rng.randrange(2, 29)
    count = rng.randrange(32, 98)
    item = rng.randrange(len(_ITEMS["en"]))
    ident = f"{rng.choice('BKRQ')}{rng.choice('KXZT')}-{rng.randrange(10_000, 99_999)}-{rng.choice('QWJV')}"
    first, last = rng.choice(_NAMES[language])
    folder = rng.choice(("offsite", "events", "plans"))
    path = f"/srv/{folder}/{2026 + month % 2}/agenda_v{rng.randrange(2, 9)}.md"
    iso = f"2026-{month:02d}-{day:02d}"
    name = f"{first} {last}" if language == "en" else f"{first}{last}"
    return {
        "budget": Fact(
            "budget",
            f"{amount:,}" if language == "en" else str(amount),
            (f"{amount:,}", str(amount), f"{amount:,}".replace(",", " ")),
            language,
        ),
        "date": Fact(
            "date",
            iso,
            (
                iso,
                f"{_MONTHS[month - 1]} {day}",
                f"{day} {_MONTHS[month - 1]}",
                f"{_MONTHS[month - 1][:3]} {day}",
                f"{month}月{day}日",
                f"{month}/{day}",
            ),
            language,
        ),
        "count": Fact("count", str(count), (str(count),), language),
        # Kept in another language is still kept (the language is measured on its own).
        "prohibition": Fact(
            "prohibition", _ITEMS[language][item], (_ITEMS[language][item], _ITEMS["en"][item]), language
        ),
        "id": Fact("id", ident, (ident,), language),
        # The family name alone identifies the person in these conversations.
        "name": Fact("name", name, (name, last if language == "en" else name), language),
        "path": Fact("path", path, (path,), language),
    }


_EN_TURNS = (
    (
        "Hi! I'm organising our team's spring offsite and could use a hand keeping everything straight.",
        "Happy to help. Offsites go best when the constraints are written down early: money, timing, "
        "who is coming and anything the venue must avoid. Tell me what you have so far and I will keep "
        "track of it while we plan the rest together.",
    ),
    (
        "First the money: the total budget is {budget} euros, and that is a hard ceiling, travel included.",
        "Understood, that ceiling covers everything including travel. We will want to leave a small "
        "buffer for surprises such as a late taxi or an extra coffee break, so it is wise to plan the "
        "main items a little below it.",
    ),
    (
        "The weather last year was awful, by the way. It rained the whole time and everyone was grumpy.",
        "Rain does tend to dampen the mood of an offsite. Having an indoor plan for every outdoor "
        "activity helps a lot, and a warm lunch venue makes a surprising difference to how people "
        "remember the day.",
    ),
    (
        "It has to happen on {date}; that is the only day the whole team is free.",
        "Got it, the date is fixed. That makes booking simpler: we can ask venues directly for that "
        "day instead of comparing several options, and we should confirm quickly because popular "
        "places fill up early in the season.",
    ),
    (
        "We will be exactly {count} people, counting the two interns.",
        "Thanks, a firm headcount helps with catering and with the size of the room. Venues usually "
        "want a final number a week or so ahead, and it is good practice to ask how they handle a "
        "late cancellation or an extra guest.",
    ),
    (
        "One strict rule: absolutely no {prohibition} in any of the food, two colleagues are "
        "severely allergic.",
        "That is important and I will treat it as non-negotiable. We should tell the caterer in "
        "writing, ask them to confirm how they prevent cross-contact in the kitchen, and label the "
        "dishes clearly on the day.",
    ),
    (
        "Do you think people prefer workshops or just free time? I can never tell.",
        "Most teams like a mix: a couple of focused sessions in the morning while energy is high, "
        "and open time in the afternoon for walks or informal conversations. Asking a few colleagues "
        "in advance is the easiest way to find the right balance.",
    ),
    (
        "The venue gave me booking reference {id}, please keep it handy.",
        "Noted. Keep that reference with the confirmation email, since the venue will ask for it "
        "whenever you change the order, add dietary notes or settle the invoice afterwards.",
    ),
    (
        "Our contact at the venue is {name}, she or he answers emails quickly.",
        "Good to have a responsive contact. It is worth sending one message that lists everything "
        "we have agreed so far, so there is a single written record both sides can point to.",
    ),
    (
        "I saved the draft agenda at {path} so the others can comment on it.",
        "Great, having the agenda in one shared place keeps everyone on the same version. Ask "
        "people to leave comments instead of editing directly, so you can see the suggestions.",
    ),
)
_EN_TAIL = (
    (
        "Let's talk about something else for a moment. How do you keep a long meeting from dragging?",
        "A few habits help a great deal. Start with a clear purpose that everyone can repeat, keep "
        "each topic to a time box, and name someone who gently brings the discussion back when it "
        "drifts. Short breaks keep attention up, and ending a little early is always welcome. "
        "Writing the decisions down as they are made avoids the long recap at the end, and sending "
        "the notes soon afterwards means nobody has to rely on memory later on.",
    ),
    (
        "And icebreakers? Some people really hate them.",
        "Icebreakers work best when they are optional, quick and related to the work. Asking "
        "everyone to share one thing they learned recently, or a small win from the past weeks, is "
        "gentle and useful. Avoid anything that forces people to perform or reveal personal details. "
        "If the group already knows each other well, a short walk or a shared coffee often does the "
        "job better than any structured game, and it feels far more natural to most people.",
    ),
    (
        "What about the closing session, any ideas for ending on a good note?",
        "A short round where each person names one thing they will do differently works well, "
        "followed by a thank you to the organisers. Keep it brief and warm, and make sure the next "
        "steps are written where everyone can find them afterwards.",
    ),
    (
        "Any advice on getting feedback after the event?",
        "Send a short survey within a day or two, while memories are fresh, with no more than a "
        "handful of questions. Ask what people would keep, what they would change and what they "
        "would drop entirely, and leave one open box for anything else. Share a summary of the "
        "answers with the team, and say which suggestions you will act on next time, so people "
        "see that giving feedback is worth their while and keep doing it in the future.",
    ),
    (
        "And how do I thank the people who helped organise it?",
        "A personal note goes a long way, especially when it names something specific each person "
        "did. Mentioning their help in front of the team is also appreciated, and a small gesture "
        "such as a coffee or a book they would enjoy shows that their extra effort was noticed. "
        "Above all, involve them early when planning the next event, since that trust is often "
        "the thanks people value most.",
    ),
)
_ZH_TURNS = (
    (
        "你好！我在筹备我们团队春季的团建活动，想请你帮我把各项安排理清楚。",
        "很乐意帮忙。团建最好一开始就把约束条件写清楚：经费、时间、参加的人，以及场地必须避免的事情。"
        "你把目前知道的告诉我，我会在我们一起规划其余部分的时候帮你记着。",
    ),
    (
        "先说钱：总预算是{budget}元，这是硬性上限，交通费也包含在内。",
        "明白，这个上限涵盖所有费用，包括交通。最好留一点余量应对意外情况，比如临时打车或者多加一次茶歇，"
        "所以主要项目的安排最好略低于这个数。",
    ),
    (
        "顺便说一下，去年的天气糟透了，一直下雨，大家心情都不好。",
        "下雨确实会影响团建的气氛。每个户外活动都准备一个室内备选方案会很有帮助，"
        "而一个温暖的午餐场所对大家怎样记住这一天影响出奇地大。",
    ),
    (
        "活动必须在{date}举行，那是全组唯一都有空的日子。",
        "好的，日期已经确定。这让预订更简单：我们可以直接向场地询问那一天，而不用比较多个选项。"
        "我们应该尽快确认，因为热门场地在旺季很早就会订满。",
    ),
    (
        "我们一共正好{count}个人，包括两名实习生。",
        "谢谢，确定的人数对餐饮和会议室大小都有帮助。场地通常希望提前一周左右拿到最终人数，"
        "也最好问清楚他们怎样处理临时取消或者多来一位客人的情况。",
    ),
    (
        "有一条硬规定：所有食物里绝对不能有{prohibition}，两位同事严重过敏。",
        "这一点很重要，我会把它当作不可商量的要求。我们应该书面通知餐饮方，请他们确认厨房里如何避免交叉接触，"
        "并在当天把菜品标注清楚。",
    ),
    (
        "你觉得大家更喜欢工作坊还是自由活动？我总是拿不准。",
        "大多数团队喜欢两者结合：上午精力充沛的时候安排几场专注的讨论，下午留出自由时间散步或者随意聊天。"
        "事先问几位同事是找到合适平衡最简单的办法。",
    ),
    (
        "场地给了我一个预订编号{id}，请帮我记着。",
        "记下了。把这个编号和确认邮件放在一起，因为以后修改订单、补充饮食要求或者结账的时候，场地都会问你要它。",
    ),
    (
        "场地的联系人是{name}，回邮件很快。",
        "有一个回复及时的联系人很好。值得发一封邮件，把目前谈妥的所有事项列出来，这样双方都有一份可以参照的书面记录。",
    ),
    (
        "我把议程草稿保存在{path}，方便其他人提意见。",
        "很好，把议程放在一个共享的地方能让大家看到同一个版本。请大家留评论而不是直接修改，这样你能看到所有建议。",
    ),
)
_ZH_TAIL = (
    (
        "我们先聊点别的。你怎样避免一个长会议拖拖拉拉？",
        "有几个习惯很有用。开始时说明一个大家都能复述的明确目的，每个议题都限定时间，并指定一个人在讨论跑题时温和地把话题拉回来。"
        "短暂的休息能保持注意力，提前一点结束总是受欢迎的。当场把决定写下来可以省去最后冗长的回顾，"
        "会后尽快发出纪要，就没有人需要靠记忆了。",
    ),
    (
        "那破冰游戏呢？有些人真的很讨厌。",
        "破冰活动最好是自愿的、简短的，并且和工作相关。请每个人分享最近学到的一件事，或者过去几周的一个小成就，"
        "既温和又有用。避免任何强迫别人表演或者透露个人隐私的活动。如果大家已经很熟悉，一起散散步或者喝杯咖啡，"
        "往往比任何有组织的游戏效果更好，也让大多数人感觉自然得多。",
    ),
    (
        "最后一个环节呢？有没有什么办法让活动圆满结束？",
        "可以请每个人说一件自己以后会做得不一样的事，然后感谢组织者。保持简短而温暖，"
        "并确保后续事项写在大家之后都能找到的地方。",
    ),
    (
        "活动结束后怎样收集反馈比较好？",
        "在一两天之内发一份简短的问卷，趁大家记忆还新鲜，问题不要超过几个。问问大家想保留什么、想改变什么、"
        "想完全去掉什么，再留一个开放的文本框写其他想法。把结果的概要分享给团队，并说明下次会采纳哪些建议，"
        "这样大家会觉得提意见是值得的，以后也愿意继续提。",
    ),
    (
        "那我该怎样感谢帮忙组织的同事？",
        "一张亲手写的感谢卡很有分量，尤其是写出每个人具体做了什么。在团队面前提到他们的帮助也会让人感到被认可，"
        "一杯咖啡或者一本他们会喜欢的书这样的小心意，表明他们额外的付出被看见了。最重要的是，"
        "下次筹备活动时尽早邀请他们参与，这种信任往往是大家最看重的感谢。",
    ),
)


def conversation(index: int, seed: int = 19, profile: ModelProfile | None = None) -> Conversation:
    """Conversation `index`: English when even, Chinese when odd; values drawn from the seed.
    Its fact-free tail is at least as long as any tail compaction with `profile` (default: the
    local model's) keeps, so every planted fact is in the part that is summarized."""
    language: Language = "en" if index % 2 == 0 else "zh"
    facts = _facts(random.Random(seed * 1_000 + index), language)
    values = {kind: fact.value for kind, fact in facts.items()}
    turns, tail = (_EN_TURNS, _EN_TAIL) if language == "en" else (_ZH_TURNS, _ZH_TAIL)
    budget = budget_for(profile or local_profile())
    counter = TokenCounter.for_profile(profile or local_profile())
    closing = "Thanks, that's all for now." if language == "en" else "谢谢，今天就先到这里。"
    messages: list[BaseMessage] = []

    def add(user: str, assistant: str) -> None:
        messages.append(HumanMessage(user, id=f"u{len(messages)}"))
        messages.append(AIMessage(assistant, id=f"a{len(messages)}"))

    for user, assistant in turns:
        add(user.format(**values), assistant)
    # The tail compaction keeps is within keep, less the overhead and the summary's room.
    longest_tail = budget.keep - budget.overhead_tokens - budget.summary_max_tokens
    tail_start, pairs = len(messages), itertools.cycle(tail)
    while sum(counter.count_message(m).tokens for m in messages[tail_start:]) < longest_tail:
        add(*next(pairs))
    messages.append(HumanMessage(closing, id=f"u{len(messages)}"))
    return Conversation(language, messages, list(facts.values()))


def conversations(count: int, seed: int = 19) -> list[Conversation]:
    return [conversation(i, seed) for i in range(count)]


# -- measuring ------------------------------------------------------------------------------


# A letter of any script: a line without one (a rule, a bare number) has no language.
_HAS_WORDS = re.compile(r"[^\W\d_]")


def off_language_lines(summary: str, conversation: Conversation) -> list[str]:
    """The lines of the summary, headings included, not in the conversation's language as the
    product reads a script (`chat_shell.languages`), the planted values left out (an id or a
    path is no language). Line by line: Chinese points under English headings are not a
    Chinese summary, though the whole text reads as Chinese."""
    wanted = "zh" if conversation.language == "zh" else None
    off = []
    for line in summary.splitlines():
        bare = line
        for fact in conversation.facts:
            bare = bare.replace(fact.value, " ")
        if _HAS_WORDS.search(bare) and cjk_language(bare) != wanted:
            off.append(line)
    return off


def in_language(summary: str, conversation: Conversation) -> bool:
    """Whether every line of the summary that holds words is in the conversation's language."""
    return not off_language_lines(summary, conversation)


# The local model writes 4-7 tokens/s on 2 busy cores: a summary call can outlast the default
# 120 s limit (`CHAT_SHELL_SUMMARY_TIMEOUT_SECONDS` raises it in the product too).
SUMMARY_TIMEOUT_SECONDS = 600.0
SLOW_MACHINE = CompactionSettings(summary_timeout_seconds=SUMMARY_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class Summary:
    text: str
    seconds: float
    # Summarizer calls it took (ours: a second one is the shortening pass).
    calls: int
    # The messages at the end of the conversation kept verbatim (not summarized).
    kept_tail: int

    def kept(self, conversation: Conversation) -> list[Fact]:
        return [fact for fact in conversation.facts if fact.kept_in(self.text)]


def local_profile(model_id: str = LOCAL_MODEL_NAME) -> ModelProfile:
    return resolve_profile(model_id)


def summary_model(
    base_url: str,
    profile: ModelProfile,
    budget: Budget,
    *,
    temperature: float | None = CompactionSettings.summary_temperature,
) -> BaseChatModel:
    """The chat model the runtime gives summary compaction (`ChatShell.summarizer`): the turn
    model's profile with room for twice the summary cap, at the product's summary temperature
    unless told (None: the profile's own sampling, as the chat's replies use)."""
    writer = replace(profile, max_output_tokens=min(profile.max_output_tokens, 2 * budget.summary_max_tokens))
    return create_chat_model(
        writer,
        ProviderConfig(base_url=base_url, timeout_seconds=SUMMARY_TIMEOUT_SECONDS),
        purpose="summary",
        temperature=temperature,
    )


def request_at_trigger(
    messages: list[BaseMessage],
    tokens: list[int],
    counter: TokenCounter,
    budget: Budget,
    emit: EventSink,
) -> SummaryRequest:
    """The unforced request the guard makes of the summary stage over `messages` (counted
    `tokens`), with the estimate of a request of them and no provider report."""
    current = estimate(
        sum(tokens) + REPLY_PRIMING,
        overhead_tokens=budget.overhead_tokens,
        fit=Fit(budget.overhead_tokens, 1.0, 0, False),
        reported=None,
    )
    return SummaryRequest(
        messages=messages,
        message_tokens=tokens,
        fixed_tokens=REPLY_PRIMING,
        estimate=current,
        budget=budget,
        counter=counter,
        emit=emit,
        forced=False,
    )


class _Counted:
    def __init__(self, summarizer: ModelSummarizer) -> None:
        self._summarizer = summarizer
        self.calls = 0

    async def __call__(self, messages: list[BaseMessage]) -> str:
        self.calls += 1
        return await self._summarizer(messages)


async def summarize_ours(model: BaseChatModel, profile: ModelProfile, conversation: Conversation) -> Summary:
    """The guard's summary stage over the conversation, as at the trigger."""
    budget = budget_for(profile)
    counter = TokenCounter.for_profile(profile)
    messages = conversation.messages
    tokens = [counter.count_message(m).tokens for m in messages]
    summarizer = _Counted(ModelSummarizer(model))
    started = time.perf_counter()
    compactor = SummaryCompactor(summarizer, conversation_id=1, settings=SLOW_MACHINE)
    outcome = await compactor(request_at_trigger(messages, tokens, counter, budget, lambda _: None))
    seconds = time.perf_counter() - started
    assert outcome.messages is not None and outcome.record.summary_text, outcome.record
    kept_tail = len(outcome.messages) - 1  # after the summary message
    summarized = "\n".join(str(m.content) for m in messages[: len(messages) - kept_tail])
    missing = [f.value for f in conversation.facts if f.value not in summarized]
    assert not missing, f"planted facts in the kept tail, not summarized: {missing}"
    return Summary(outcome.record.summary_text, seconds, summarizer.calls, kept_tail)


async def summarize_langchain(model: BaseChatModel, conversation: Conversation, kept_tail: int) -> Summary:
    """LangChain's `SummarizationMiddleware` with its default prompt, keeping `kept_tail`
    messages (the tail ours kept), so it summarizes the same messages."""
    middleware = SummarizationMiddleware(model, trigger=("messages", 2), keep=("messages", kept_tail))
    started = time.perf_counter()
    update = await middleware.abefore_model({"messages": list(conversation.messages)}, None)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    assert update is not None
    removal, summary_message, *rest = update["messages"]
    assert removal.id == REMOVE_ALL_MESSAGES and len(rest) == kept_tail, update
    # The middleware prefixes its summary with a fixed line; the summary is what follows.
    text = summary_message.text.split("\n\n", 1)[-1]
    return Summary(text, seconds, 1, kept_tail)
