"""The ``simulated`` backend: a deterministic, seeded imitation of a ReAct agent model.

It is a test and demo instrument. It reads only the prompt text it is sent (the Markdown
sections written by ``agents.prompts``) and the requested output schema; it never looks at
the database, settings, the sandbox or any scenario's expected answer. From the user
request it guesses an intent and entities with plain regular expressions, plans the next
tool call from the rounds shown in the prompt, and answers only with facts found in
observations.

For the Self-RAG prompts it drafts by quoting the retrieved document sentences that share
the most key words with the question (or says it does not know), and grades strictly:
grounded only when every draft sentence is near-verbatim in the documents, helpful only
when the draft contains every key word of the question.

Randomness comes from one ``random.Random`` seeded from (seed, sha256 of the prompt,
purpose), so the same prompt and seed always give the same text. It makes the mistakes
real models make (``error_rates``) and, with probability ``hint_follow_rate``, avoids a
mistake when a strategy hint in the prompt mentions it.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel

from agents.llm.base import ChatMessage, LLMError, LLMResponse, LLMUsage
from agents.llm.schemas import FINAL_ANSWER, RagDraft, RagGrade, ReasoningStep, Reflection
from agents.prompts import canonical_json, unquoted

MISTAKES = ("skip_tool", "name_for_sku", "string_for_int", "repeat_action", "malformed_json")

ORDER_ID_RE = re.compile(r"(?<![A-Za-z0-9])#?W(\d{7})(?!\d)")
USER_ID_RE = re.compile(r"(?<![A-Za-z0-9])U\d{8}(?!\d)")
SKU_RE = re.compile(r"(?<![A-Za-z0-9-])[A-Za-z]{2,4}-\d{4}-[A-Za-z0-9]{2,4}(?![A-Za-z0-9-])")
SKU_EXACT_RE = re.compile(r"^[A-Z]{2,4}-\d{4}-[A-Z0-9]{2,4}$")

_SECTION_RE = re.compile(
    r"^## (User request|Customer|Tools|Strategy hints|Key facts|Earlier rounds|Recent rounds"
    r"|Warnings|Instructions|Last action|Observation)[ \t]*$",
    re.MULTILINE,
)
_ROUND_HEADING_RE = re.compile(r"^### Round (\d+)[ \t]*$", re.MULTILINE)
_SUMMARY_RE = re.compile(r"^Round (\d+): (.*)$", re.DOTALL)
_OBSERVATION_LINE_RE = re.compile(r"^Observation \[([^\]]*)\]: ?", re.MULTILINE)

_WORDS = {
    "return": (
        r"\b(returns?|returning|refunds?|refunded|send (?:it |them |this |that )?back|"
        r"exchange)\b"
    ),
    "price": (
        r"\b(prices?|priced|costs?|how much|cheaper|cheapest|discounts?|deals?|on sale|"
        r"promotions?|promo|compare|comparison|expensive)\b"
    ),
    "stock": (
        r"\b(in stock|out of stock|back in stock|available|availability|inventory|restock(?:ed)?|"
        r"stock)\b"
    ),
    "order": (
        r"\b(orders?|where|shipped|tracking|track|delivery|delivered|deliver|arrive|arriving|"
        r"arrival|package|parcel)\b"
    ),
    "policy": (
        r"\b(polic(?:y|ies)|how long|can i|warranty|guarantee|shipping times?|shipping costs?|"
        r"payments?|pay|paypal|international(?:ly)?|fees?|faq|allowed|do you ship|how do i|"
        r"how can i|window)\b"
    ),
}
_INTENT_RE = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in _WORDS.items()}
_COMPARE_RE = re.compile(
    r"\b(cheaper|cheapest|compare|comparison|versus|vs\.?|difference|more expensive)\b",
    re.IGNORECASE,
)


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words that start a sentence or a request but are never part of a product name.
_NAME_STOPWORDS = _word_set(
    """a an and any are be by can could did do does for from get has have hello hey hi how i
    i'd i'm im in is it it's its me my no of on or order our please price sku so tell thanks
    thank that the these this those to u us what what's whats when where which who why will
    with would yes you your cost much many stock last latest recent"""
)
_TRIGGER_RE = re.compile(
    r"\b(?:prices? (?:of|for)|costs? of|is the|are the|does the|do the|"
    r"do you have(?: (?:the|any))?|the|for)\s+(?P<rest>[^?.!,;]+)",
    re.IGNORECASE,
)
_NAME_CUT_RE = re.compile(
    r"\s+(?:in stock|out of stock|back in stock|cost|costs|available|availability|right now|"
    r"currently|today|now|still|please|at the moment|be back|come back|restocked|restock|"
    r"on sale|go for|sell for|priced)\b.*$",
    re.IGNORECASE,
)
_NAME_SPLIT_RE = re.compile(
    r"\s+(?:or|and|vs\.?|versus|compared (?:to|with))\s+|\s*,\s*", re.IGNORECASE
)
_NOT_PRODUCT_RE = re.compile(
    r"\b(shipping|delivery|return|returns|refund|warranty|polic(?:y|ies)|fee|fees|payment|order|"
    r"orders|account|website|store|shop|customer|service|help)\b",
    re.IGNORECASE,
)
_QUERY_STOPWORDS = _NAME_STOPWORDS | _word_set(
    """about after before long take takes know need want there their them they was were
    am been much many if we our ours just also than then able more most some very"""
)

_TRANSIENT_TYPES = frozenset(
    {"RATE_LIMITED", "INTERNAL_SERVER_ERROR", "TIMEOUT", "SERVICE_UNAVAILABLE", "BAD_GATEWAY"}
)
_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})
_DENIED_TYPES = frozenset({"UNAUTHORIZED", "FORBIDDEN", "TOOL_NOT_ALLOWED", "INVALID_ENDPOINT"})
_DENIED_TEXT_RE = re.compile(
    r"suspended|not allowed|not_allowed|not permitted|disabled|forbidden", re.IGNORECASE
)

_HINT_RE = {
    "string_for_int": re.compile(
        r"\b(integers?|int|numeric|limit|as a number|as numbers|not a string|unquoted)\b",
        re.IGNORECASE,
    ),
    "name_for_sku": re.compile(
        r"\b(skus?|sku codes?|search_products|product names?|get_sku_price|check_inventory)\b",
        re.IGNORECASE,
    ),
    "skip_tool": re.compile(
        r"call a tool|call the tool|do not answer without|don't answer without|"
        r"never answer without|before answering|without calling|tool first|hallucinat|verify",
        re.IGNORECASE,
    ),
    "malformed_json": re.compile(
        r"\b(json|double quotes|trailing commas?|well-formed|malformed)\b", re.IGNORECASE
    ),
    "repeat_action": re.compile(
        r"\b(repeat|repeating|repeated|same action|same arguments|same call|loops?|again)\b",
        re.IGNORECASE,
    ),
}

_EXPECTATIONS = {
    "get_order": "The order's status, carrier, tracking number and delivery date.",
    "list_user_orders": "The user's most recent orders, newest first, with their order ids.",
    "get_return_status": "Whether the order can be returned, the deadline and any return requests.",
    "search_products": "Matching products with their SKU codes.",
    "get_sku_price": "The SKU's price, active promotions and final price.",
    "check_inventory": "Stock per warehouse, and a restock date if it is out of stock.",
    "search_articles": "Help articles with their titles and summaries.",
    "compare_prices": "Which of the two prices is cheaper and the difference.",
}


class SimulatedLLM:
    """A seeded ReAct model imitation; see the module docstring."""

    backend = "simulated"
    model = "simulated-react-1"

    def __init__(
        self,
        *,
        seed: int,
        error_rates: dict[str, float],
        hint_follow_rate: float,
        latency_ms: int = 0,
    ) -> None:
        self.seed = seed
        self.error_rates = {name: float(rate) for name, rate in (error_rates or {}).items()}
        self.hint_follow_rate = float(hint_follow_rate)
        self.latency_ms = latency_ms

    def _reflexion_text(self, prompt: str, rng: random.Random) -> str:
        from agents.llm.simulated_reflexion import reflexion_text

        return reflexion_text(
            prompt, rng, vague_rate=float(self.error_rates.get("vague_reflexion", 0.0))
        )

    async def complete(
        self,
        *,
        messages: list[ChatMessage],
        schema: type[BaseModel],
        purpose: str,
        json_schema: dict[str, Any] | None = None,
    ) -> LLMResponse:
        """Answer one reasoning, reflection or Self-RAG prompt with JSON text (or, by design,
        not). ``json_schema`` is ignored: nothing constrains this model's output."""
        started = time.perf_counter()
        answer: Callable[[str, random.Random], str]
        if issubclass(schema, ReasoningStep):
            answer = self._reasoning_text
        elif issubclass(schema, Reflection):
            answer = self._reflection_text
        elif issubclass(schema, RagDraft):
            answer = self._rag_draft_text
        elif issubclass(schema, RagGrade):
            answer = self._rag_grade_text
        elif schema.__name__ == "ReflexionOutput":
            answer = self._reflexion_text
        else:
            raise LLMError(
                f"simulated backend cannot answer schema {schema.__name__}", transient=False
            )
        full_text = "\n\n".join(f"{message.role}:\n{message.content}" for message in messages)
        rng = random.Random(self._rng_seed(full_text, purpose))
        text = answer(_prompt_body(messages), rng)
        if self.latency_ms > 0:
            await asyncio.sleep(self.latency_ms / 1000)
        return LLMResponse(
            text=text,
            backend=self.backend,
            model=self.model,
            usage=LLMUsage(
                prompt_tokens=estimate_tokens(full_text),
                completion_tokens=estimate_tokens(text),
                cost_usd=0.0,
            ),
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    def _rng_seed(self, full_text: str, purpose: str) -> int:
        prompt_digest = hashlib.sha256(full_text.encode("utf-8")).hexdigest()
        material = f"{self.seed}|{prompt_digest}|{purpose}".encode()
        return int.from_bytes(hashlib.sha256(material).digest()[:8], "big")

    def _reasoning_text(self, body: str, rng: random.Random) -> str:
        prompt = parse_reasoning_prompt(body)
        decision = ReActPlanner(prompt).decide()
        mistake, decision = self._draw_mistake(prompt, decision, rng)
        payload = _step_payload(decision)
        if mistake == "malformed_json":
            return _malformed(payload, rng)
        return json.dumps(payload, ensure_ascii=False)

    def _reflection_text(self, body: str, rng: random.Random) -> str:
        return json.dumps(reflect(parse_reflection_prompt(body)), ensure_ascii=False)

    def _rag_draft_text(self, body: str, rng: random.Random) -> str:
        return self._maybe_malformed(rag_draft(parse_rag_prompt(body)), rng)

    def _rag_grade_text(self, body: str, rng: random.Random) -> str:
        return self._maybe_malformed(rag_grade(parse_rag_prompt(body)), rng)

    def _maybe_malformed(self, payload: dict[str, Any], rng: random.Random) -> str:
        """Self-RAG prompts carry no hints, so the only mistake that applies is broken JSON."""
        if rng.random() < self.error_rates.get("malformed_json", 0.0):
            return _malformed(payload, rng)
        return json.dumps(payload, ensure_ascii=False)

    def _draw_mistake(
        self, prompt: ReasoningPrompt, decision: Decision, rng: random.Random
    ) -> tuple[str | None, Decision]:
        """Draw at most one applicable mistake; a related strategy hint may prevent it."""
        for kind in MISTAKES:
            involved = _mistake_involves(kind, prompt, decision)
            if involved is None:
                continue
            if rng.random() >= self.error_rates.get(kind, 0.0):
                continue
            if _hinted(prompt.hints, kind, involved) and rng.random() < self.hint_follow_rate:
                continue
            return kind, _make_mistake(kind, prompt, decision, rng)
        return None, decision


def estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _prompt_body(messages: list[ChatMessage]) -> str:
    """The prompt among the messages: the last one with a ReAct or Self-RAG heading, else
    the last."""
    for message in reversed(messages):
        if message.content.lstrip().startswith(("# ReAct", "# Self-RAG")):
            return message.content
    return messages[-1].content if messages else ""


# --- Prompt parsing -------------------------------------------------------------------


@dataclass(frozen=True)
class ToolInfo:
    name: str
    params: dict[str, Any]

    def numeric_params(self) -> list[str]:
        properties = self.params.get("properties") or {}
        return [
            name
            for name, spec in properties.items()
            if isinstance(spec, dict) and spec.get("type") in ("integer", "number")
        ]

    def accepts(self, param: str) -> bool:
        return param in (self.params.get("properties") or {})


@dataclass
class Round:
    number: int
    action: str
    action_input: dict[str, Any]
    ok: bool | None
    status_code: int | None
    error_type: str
    observation: str

    @property
    def failed(self) -> bool:
        return self.ok is False


@dataclass
class ReasoningPrompt:
    request: str
    customer_id: str = ""
    tools: dict[str, ToolInfo] = field(default_factory=dict)
    hints: list[str] = field(default_factory=list)
    key_facts: list[str] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class ReflectionPrompt:
    request: str
    action: str
    action_input: dict[str, Any]
    ok: bool | None
    status_code: int | None
    error_type: str
    observation: str


def _sections(body: str) -> dict[str, str]:
    matches = list(_SECTION_RE.finditer(body))
    sections: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(body)
        content = body[match.end() : end].strip("\n")
        sections.setdefault(match.group(1), "" if content.strip() == "- (none)" else content)
    return sections


def _bullets(text: str) -> list[str]:
    return [line[2:].strip() for line in text.splitlines() if line.startswith("- ")]


def _split_action(text: str) -> tuple[str, dict[str, Any], str]:
    """Split ``name {json}rest`` into the name, the decoded arguments and the rest."""
    brace = text.find("{")
    if brace < 0:
        return text.strip(), {}, ""
    try:
        value, end = json.JSONDecoder().raw_decode(text, brace)
    except json.JSONDecodeError:
        return text[:brace].strip(), {}, text[brace:]
    return text[:brace].strip(), value if isinstance(value, dict) else {}, text[end:]


def parse_label(label: str) -> tuple[bool | None, int | None, str]:
    """``ok 200`` / ``error 404 RESOURCE_NOT_FOUND`` / ``error TIMEOUT`` -> parts."""
    parts = label.split()
    if not parts:
        return None, None, ""
    ok = parts[0].lower() == "ok"
    code = next((int(part) for part in parts[1:] if part.isdigit()), None)
    error_type = next((part.upper() for part in parts[1:] if not part.isdigit()), "")
    return ok, code, error_type


def _parse_recent(text: str) -> list[Round]:
    headings = list(_ROUND_HEADING_RE.finditer(text))
    rounds = []
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        chunk = text[heading.end() : end]
        action_match = re.search(r"^Action: ?(.*)$", chunk, re.MULTILINE)
        name, arguments, _ = _split_action(action_match.group(1) if action_match else "")
        ok: bool | None = None
        code: int | None = None
        error_type = observation = ""
        observed = _OBSERVATION_LINE_RE.search(chunk)
        if observed:
            ok, code, error_type = parse_label(observed.group(1))
            rest = chunk[observed.end() :]
            reflection_at = rest.rfind("\nReflection: ")
            observation = (rest[:reflection_at] if reflection_at >= 0 else rest).strip()
        rounds.append(
            Round(int(heading.group(1)), name, arguments, ok, code, error_type, observation)
        )
    return rounds


def _parse_summary(line: str) -> Round | None:
    match = _SUMMARY_RE.match(line)
    if not match:
        return None
    name, arguments, rest = _split_action(match.group(2))
    label_match = re.match(r"\s*->\s*\[([^\]]*)\]\s?(.*)$", rest, re.DOTALL)
    ok, code, error_type = parse_label(label_match.group(1)) if label_match else (None, None, "")
    observation = label_match.group(2).strip() if label_match else ""
    return Round(int(match.group(1)), name, arguments, ok, code, error_type, observation)


def parse_reasoning_prompt(body: str) -> ReasoningPrompt:
    sections = _sections(body)
    if "User request" not in sections:
        raise LLMError(
            "simulated backend cannot read this prompt: no user request", transient=False
        )
    tools: dict[str, ToolInfo] = {}
    for line in _bullets(sections.get("Tools", "")):
        head, _, params_text = line.rpartition(" | params: ")
        name = (head or line).split(":", 1)[0].strip()
        try:
            params = json.loads(params_text) if head else {}
        except json.JSONDecodeError:
            params = {}
        if name:
            tools[name] = ToolInfo(name, params if isinstance(params, dict) else {})
    customer = re.search(r"customer_id:\s*(\S+)", sections.get("Customer", ""))
    key_facts = _bullets(sections.get("Key facts", ""))
    earlier = [_parse_summary(line) for line in _bullets(sections.get("Earlier rounds", ""))]
    rounds = [_with_key_fact(rnd, key_facts) for rnd in earlier if rnd is not None]
    rounds += _parse_recent(sections.get("Recent rounds", ""))
    return ReasoningPrompt(
        request=unquoted(sections["User request"]),
        customer_id=customer.group(1) if customer else "",
        tools=tools,
        hints=_bullets(sections.get("Strategy hints", "")),
        key_facts=key_facts,
        rounds=sorted(rounds, key=lambda rnd: rnd.number),
        warnings=_bullets(sections.get("Warnings", "")),
    )


def _with_key_fact(rnd: Round, key_facts: list[str]) -> Round:
    """A summarised round gets the longer result its key fact keeps (``<call> -> <result>``)."""
    if not rnd.ok:
        return rnd
    signature = f"{rnd.action} {canonical_json(rnd.action_input)} -> "
    for fact in key_facts:
        if fact.startswith(signature) and len(fact) - len(signature) > len(rnd.observation):
            rnd.observation = fact[len(signature) :]
    return rnd


def parse_reflection_prompt(body: str) -> ReflectionPrompt:
    sections = _sections(body)
    action_line = re.search(r"^Action: ?(.*)$", sections.get("Last action", ""), re.MULTILINE)
    name, arguments, _ = _split_action(action_line.group(1) if action_line else "")
    observed = re.match(r"\s*\[([^\]]*)\]\s?(.*)$", sections.get("Observation", ""), re.DOTALL)
    ok, code, error_type = parse_label(observed.group(1)) if observed else (None, None, "")
    return ReflectionPrompt(
        request=unquoted(sections.get("User request", "")),
        action=name,
        action_input=arguments,
        ok=ok,
        status_code=code,
        error_type=error_type,
        observation=observed.group(2).strip() if observed else "",
    )


# --- Understanding the request -------------------------------------------------------


@dataclass(frozen=True)
class Request:
    text: str
    intent: str  # order | return | price | stock | policy
    order_ids: list[str]
    user_ids: list[str]
    skus: list[str]
    products: list[str]
    compare: bool


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _clean_name(phrase: str) -> str:
    words = [word.strip("'\"“”") for word in _NAME_CUT_RE.sub("", phrase).split()]
    while words and words[0].lower() in _NAME_STOPWORDS:
        words.pop(0)
    while words and words[-1].lower() in _NAME_STOPWORDS:
        words.pop()
    name = " ".join(words[:8])
    if len(name) < 2 or _NOT_PRODUCT_RE.search(name) or SKU_RE.fullmatch(name):
        return ""
    return name


def _capitalised_runs(text: str) -> list[str]:
    """Runs of capitalised words (``Aurora Wireless Headphones``), minus question words.

    A lone capitalised word opening a sentence ("Quick question") is not taken for a name.
    """
    runs: list[tuple[int, list[str]]] = []
    open_run = False
    previous_end = -1
    for match in re.finditer(r"[A-Za-z0-9][\w'&+-]*", text):
        word = match.group(0)
        capitalised = word[0].isupper() or word[0].isdigit()
        is_id = any(regex.fullmatch(word) for regex in (ORDER_ID_RE, USER_ID_RE, SKU_RE))
        adjacent = previous_end >= 0 and text[previous_end : match.start()].isspace()
        if capitalised and not is_id:
            if open_run and adjacent:
                runs[-1][1].append(word)
            else:
                runs.append((match.start(), [word]))
            open_run = True
        else:
            open_run = False
        previous_end = match.end()
    names = []
    for start, words in runs:
        before = text[:start].rstrip()
        if len(words) == 1 and (not before or before[-1] in ".!?:"):
            continue
        name = _clean_name(" ".join(words))
        if name and any(ch.isalpha() for ch in name):
            names.append(name)
    return names


def extract_products(text: str, *, compare: bool) -> list[str]:
    """Product names from quotes, capitalised words, or the phrase after ``the``/``price of``."""
    quoted = re.findall(r"[\"“]([^\"“”]{2,80})[\"”]|(?:^|\s)'([^']{2,80})'(?=[\s?.!,]|$)", text)
    names = [_clean_name(a or b) for a, b in quoted]
    if not any(names):
        names = _capitalised_runs(text)
    if not names:
        match = _TRIGGER_RE.search(text)
        if match:
            phrase = _NAME_CUT_RE.sub("", match.group("rest"))
            parts = _NAME_SPLIT_RE.split(phrase) if compare else [phrase]
            names = [_clean_name(part) for part in parts]
    return _unique([name for name in names if name])[: 2 if compare else 1]


def understand_request(text: str, customer_id: str = "") -> Request:
    order_ids = _unique([f"#W{digits}" for digits in ORDER_ID_RE.findall(text)])
    user_ids = _unique(USER_ID_RE.findall(text))
    if not user_ids and USER_ID_RE.fullmatch(customer_id):
        user_ids = [customer_id]
    skus = _unique([sku.upper() for sku in SKU_RE.findall(text)])
    hits = {name: bool(pattern.search(text)) for name, pattern in _INTENT_RE.items()}
    compare = bool(_COMPARE_RE.search(text))
    products = [] if skus else extract_products(text, compare=compare)
    has_product = bool(skus or products)
    if hits["return"] and (order_ids or user_ids):
        intent = "return"
    elif hits["stock"] and has_product:
        intent = "stock"
    elif hits["price"] and has_product:
        intent = "price"
    elif order_ids:
        intent = "order"
    elif hits["return"] and not hits["policy"]:
        intent = "return"
    elif hits["order"] and not hits["policy"]:
        intent = "order"
    else:
        intent = "policy"
    return Request(text, intent, order_ids, user_ids, skus[:2], products, compare)


def article_query(text: str) -> str:
    words = [
        word
        for word in re.findall(r"[a-z0-9]+", text.lower())
        if word not in _QUERY_STOPWORDS and len(word) > 1
    ]
    query = " ".join(_unique(words)[:5])
    return query if len(query) >= 2 else text.strip()[:100]


# --- Reading observations ------------------------------------------------------------

# A response the API marked as possibly out of date, as the runtime notes it.
_STALE_RE = re.compile(r"Stale: the API marked this response as possibly out of date")
# The wait an API asked for, as the runtime writes it under a failed call's observation.
_ASKED_WAIT_RE = re.compile(r"Retry-After: the API asks to wait (\d+ (?:s|min|h)) before")


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _find_key(data: Any, key: str) -> Any:
    """The first non-empty value under ``key`` (or a dotted key ending in it), outermost first."""
    if isinstance(data, dict):
        for name, value in data.items():
            if (name == key or name.endswith("." + key)) and not _is_empty(value):
                return value
        for value in data.values():
            found = _find_key(value, key)
            if found is not None:
                return found
    elif isinstance(data, list):
        for item in data:
            found = _find_key(item, key)
            if found is not None:
                return found
    return None


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        amount = value.get("amount", value.get("value"))
        if amount is not None:
            return f"{amount} {value.get('currency', '')}".strip()
        label = value.get("name") or value.get("title") or value.get("code")
        return str(label) if label else json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return ", ".join(_as_text(item) for item in value if not _is_empty(item))
    return str(value)


class Facts:
    """Fields of one observation: parsed JSON first, regex over the raw text as a fallback.

    Observations may be cut (in the middle, or summarised to a prefix), so the regex
    fallback keeps partial answers possible.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            # The JSON the observation starts with; a note the runtime adds after it (a
            # Retry-After, a stale mark) is not data.
            self.data: Any = json.JSONDecoder().raw_decode(text.strip())[0]
        except (json.JSONDecodeError, ValueError):
            self.data = None

    def get(self, *keys: str) -> str | None:
        for key in keys:
            value = _find_key(self.data, key) if self.data is not None else None
            if value is not None:
                return _as_text(value)
        if self.data is not None:
            return None
        for key in keys:
            found = _regex_field(self.text, key)
            if found:
                return found
        return None

    def top(self, *keys: str) -> str | None:
        """A field of the top-level object only (a nested one may describe something else)."""
        if isinstance(self.data, dict):
            for key in keys:
                if not _is_empty(self.data.get(key)):
                    return _as_text(self.data[key])
            return None
        return self.get(*keys) if self.data is None else None

    def list_entries(self) -> list[dict[str, Any]]:
        """Every object that sits inside a list, anywhere in the parsed JSON."""
        found: list[dict[str, Any]] = []

        def walk(node: Any, in_list: bool) -> None:
            if isinstance(node, dict):
                if in_list:
                    found.append(node)
                for value in node.values():
                    walk(value, False)
            elif isinstance(node, list):
                for item in node:
                    walk(item, True)

        walk(self.data, False)
        return found


def _regex_field(text: str, key: str) -> str | None:
    if not text:
        return None
    pattern = (
        r"(?:[\"'](?:[\w.]*\.)?"
        + re.escape(key)
        + r"[\"']|(?<![\w.])(?:[\w.]*\.)?"
        + re.escape(key)
        + r"(?![\w]))\s*[:=]\s*"
        r"(\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^,}\]\n]+)"
    )
    for match in re.finditer(pattern, text):
        raw = match.group(1).strip()
        cut = raw[:1] == '"' and (len(raw) < 2 or raw[-1] != '"')
        if raw[:1] in "[{" or cut or "…" in raw or "[truncated" in raw:
            continue  # a nested value, or a value cut off by truncation
        value = raw.strip("\"'").strip()
        if value and value.lower() not in ("null", "none"):
            return value
    return None


def _number(value: str | None) -> Decimal | None:
    match = re.search(r"-?\d+(?:\.\d+)?", (value or "").replace(",", ""))
    if not match:
        return None
    try:
        return Decimal(match.group(0))
    except InvalidOperation:
        return None


def _truthy(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "1", "eligible"):
        return True
    if lowered in ("false", "no", "0", "ineligible", "not_eligible"):
        return False
    return None


def pick_sku(observation: str, request: str) -> str | None:
    """The SKU of a search result whose colour or size the request names, else the first."""
    request_words = set(re.findall(r"[a-z0-9]+", request.lower()))
    for entry in Facts(observation).list_entries():
        code = entry.get("sku")
        if not isinstance(code, str) or not SKU_EXACT_RE.match(code):
            continue
        attributes = [str(value).lower() for key, value in entry.items() if key != "sku"]
        if any(value in request_words for value in attributes if value):
            return code
    match = SKU_RE.search(observation)
    return match.group(0).upper() if match else None


# --- Planning ------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]
    thought: str
    expectation: str = ""
    # For a product search made to get a SKU: the tool the SKU is for (name_for_sku applies).
    sku_tool: str = ""
    target: str = ""


@dataclass(frozen=True)
class Answer:
    text: str
    thought: str


Decision = Call | Answer


def _norm(value: Any) -> str:
    return re.sub(r"[^0-9a-z]", "", str(value).lower())


def loosely_equal(a: Any, b: Any) -> bool:
    """Same value up to case, punctuation, or an id prefix (``#W1234567`` ~ ``1234567``)."""
    na, nb = _norm(a), _norm(b)
    if na == nb:
        return True
    da, db = re.sub(r"\D", "", str(a)), re.sub(r"\D", "", str(b))
    return bool(da) and da == db and (na == da or nb == db)


def _error_kind(rnd: Round) -> str:
    code, kind = rnd.status_code, rnd.error_type
    if kind in _DENIED_TYPES or code in (401, 403) or _DENIED_TEXT_RE.search(rnd.observation):
        return "denied"
    if kind in _TRANSIENT_TYPES or code in _TRANSIENT_CODES:
        return "transient"
    if kind == "RESOURCE_NOT_FOUND" or code == 404:
        return "not_found"
    return "invalid"


def _describe(tool: str, args: dict[str, Any]) -> str:
    """What a call was for, in words a customer understands."""
    subject = {
        "get_order": "look up order {order_id}",
        "list_user_orders": "look up the orders of {user_id}",
        "get_return_status": "check the return status of order {order_id}",
        "search_products": 'find the product "{query}"',
        "get_sku_price": "get the price of {sku}",
        "check_inventory": "check the stock of {sku}",
        "search_articles": "search our help articles",
        "compare_prices": "compare the prices",
    }.get(tool, f"use {tool}")
    try:
        return subject.format(**args)
    except (KeyError, IndexError):
        return f"use {tool}"


class ReActPlanner:
    """Chooses the next step from the request and the rounds shown in the prompt."""

    def __init__(self, prompt: ReasoningPrompt) -> None:
        self.prompt = prompt
        self.request = understand_request(prompt.request, prompt.customer_id)
        self.rounds = prompt.rounds

    def decide(self) -> Decision:
        switched = self._switch_name_to_search()
        if switched is not None:
            return switched
        plan = {
            "order": self._plan_order,
            "return": self._plan_return,
            "price": self._plan_price,
            "stock": self._plan_stock,
            "policy": self._plan_policy,
        }[self.request.intent]
        decision = plan()
        if isinstance(decision, Answer) and any(
            rnd.ok and _STALE_RE.search(rnd.observation) for rnd in self.rounds
        ):
            # The data came marked as possibly out of date: say so rather than present it
            # as current.
            decision = Answer(
                text=f"{decision.text} (The shop's system marked this information as possibly "
                "out of date, so it may have changed since.)",
                thought=f"{decision.thought} The response was marked stale, so I say so.",
            )
        return decision

    # -- helpers

    def has(self, tool: str) -> bool:
        return tool in self.prompt.tools

    def _matches(self, rnd: Round, tool: str, args: dict[str, Any]) -> bool:
        return rnd.action == tool and all(
            key in rnd.action_input and loosely_equal(rnd.action_input[key], value)
            for key, value in args.items()
        )

    def find_ok(self, tool: str, **args: Any) -> Round | None:
        found = [rnd for rnd in self.rounds if rnd.ok and self._matches(rnd, tool, args)]
        return found[-1] if found else None

    def facts(self, rnd: Round) -> Facts:
        return Facts(rnd.observation)

    def missing_tool(self, tool: str) -> Answer:
        return Answer(
            text=(
                "Sorry, I can't look that up right now: the tool I would need "
                f"({tool}) is not available to me."
            ),
            thought=f"I would need {tool}, but it is not in my tool list, so I cannot look it up.",
        )

    def attempt(self, call: Call) -> Decision:
        """Issue ``call`` unless earlier failures of it say to retry, correct or give up."""
        failures = [
            rnd for rnd in self.rounds if rnd.failed and self._matches(rnd, call.tool, call.args)
        ]
        if not failures:
            return self._unless_repeat(call)
        last = failures[-1]
        kind = _error_kind(last)
        what = _describe(call.tool, call.args)
        label = last.error_type or str(last.status_code or "error")
        if kind == "transient":
            # The runtime's note comes after the body: the last one is the header's.
            asked = next(reversed(list(_ASKED_WAIT_RE.finditer(last.observation))), None)
            when = f"in {asked.group(1)}" if asked else "in a few minutes"
            long_wait = asked is not None and not asked.group(1).endswith(" s")
            if long_wait or sum(_error_kind(rnd) == "transient" for rnd in failures) >= 2:
                # A wait of a minute or more is not worth retrying within this answer.
                failed = "is unavailable" if long_wait else "failed twice"
                return Answer(
                    text=(
                        f"Sorry, I could not {what} right now: the service {failed} "
                        f"({label}). Please try again {when}."
                    ),
                    thought=(
                        f"{call.tool} failed ({label}) and the API asks to wait {when[3:]}; "
                        "I do not retry now and say so."
                        if long_wait
                        else f"{call.tool} failed again ({label}); I stop retrying and say so."
                    ),
                )
            retry = Call(
                call.tool,
                call.args,
                f"The last {call.tool} call failed with {label}, which is usually temporary; "
                "I retry it once.",
                call.expectation,
            )
            return self._unless_repeat(retry)
        if kind == "not_found":
            return Answer(
                text=f"I could not {what}: it was not found ({label}). Please check the details.",
                thought=f"{call.tool} answered {label}; I tell the customer it was not found.",
            )
        if kind == "denied":
            return Answer(
                text=f"Sorry, I am not able to {what} right now: the tool is not available to me.",
                thought=f"{call.tool} is not usable ({label}); I stop and say so.",
            )
        if not any(rnd.action_input == call.args for rnd in failures):
            # The failed attempt carried a wrong argument; the intended call has not been tried.
            return self._unless_repeat(call)
        corrected = correct_arguments(call, last)
        if corrected is not None and not any(rnd.action_input == corrected for rnd in failures):
            return self._unless_repeat(
                Call(
                    call.tool,
                    corrected,
                    f"{call.tool} rejected the arguments ({label}); the error says what it "
                    "expects, so I correct them.",
                    call.expectation,
                )
            )
        return Answer(
            text=f"Sorry, I could not {what}: the request was rejected ({label}).",
            thought=f"{call.tool} rejected the call ({label}) and I cannot correct it; I stop.",
        )

    def _unless_repeat(self, call: Call) -> Decision:
        """After a repeat warning, never send the previous round's call again."""
        last = self.rounds[-1] if self.rounds else None
        if (
            self.prompt.warnings
            and last is not None
            and last.action == call.tool
            and last.action_input == call.args
        ):
            return Answer(
                text=(
                    f"Sorry, I could not {_describe(call.tool, call.args)} right now. "
                    "Please try again later."
                ),
                thought="I was warned not to repeat the last action, so I stop and say so.",
            )
        return call

    def _switch_name_to_search(self) -> Decision | None:
        """A product name sent as ``sku`` was rejected: search the name to get the code."""
        last = self.rounds[-1] if self.rounds else None
        if last is None or not last.failed or _error_kind(last) not in ("not_found", "invalid"):
            return None
        value = str(last.action_input.get("sku", "")).strip()
        if not value or SKU_EXACT_RE.match(value) or not self.has("search_products"):
            return None
        if self.find_ok("search_products", query=value) is not None:
            return None
        return self.attempt(
            Call(
                "search_products",
                {"query": value},
                f'"{value}" is a product name, not a SKU code; I search the products to get '
                "its SKU code.",
                _EXPECTATIONS["search_products"],
            )
        )

    # -- orders and returns

    def _order_id(self, purpose: str) -> tuple[str | None, Decision | None, str]:
        """The order to look at: from the request, or the newest of the user's orders."""
        if self.request.order_ids:
            return self.request.order_ids[0], None, ""
        if not self.request.user_ids:
            return (
                None,
                Answer(
                    text=(
                        f"I can help {purpose}. Could you tell me your order number? "
                        "It looks like #W1234567."
                    ),
                    thought="The request has no order id and no user id; I ask for the order id.",
                ),
                "",
            )
        user_id = self.request.user_ids[0]
        if not self.has("list_user_orders"):
            return None, self.missing_tool("list_user_orders"), ""
        listed = self.find_ok("list_user_orders", user_id=user_id)
        if listed is None:
            args: dict[str, Any] = {"user_id": user_id}
            if self.prompt.tools["list_user_orders"].accepts("limit"):
                args["limit"] = 3
            call = Call(
                "list_user_orders",
                args,
                f"No order id was given but user id {user_id} was; I list their recent orders "
                "to find the newest one.",
                _EXPECTATIONS["list_user_orders"],
            )
            return None, self.attempt(call), ""
        newest = ORDER_ID_RE.search(listed.observation)
        if newest is None:
            return (
                None,
                Answer(
                    text=f"I could not find any orders for user {user_id}.",
                    thought=f"list_user_orders returned no order ids for {user_id}.",
                ),
                "",
            )
        return f"#W{newest.group(1)}", None, "Your most recent order is "

    def _plan_order(self) -> Decision:
        return self._plan_order_lookup(
            tool="get_order",
            context="with your order",
            thought="The customer asks about order {oid}; I need its status and shipping "
            "details, so I call get_order.",
            answer=order_answer,
            answered="get_order returned the details of {oid}; I answer from them.",
        )

    def _plan_return(self) -> Decision:
        return self._plan_order_lookup(
            tool="get_return_status",
            context="with your return",
            thought="The customer wants to return order {oid}; I check its return eligibility.",
            answer=return_answer,
            answered="get_return_status answered for {oid}; I answer from it.",
        )

    def _plan_order_lookup(
        self,
        *,
        tool: str,
        context: str,
        thought: str,
        answer: Callable[[str, Facts], str],
        answered: str,
    ) -> Decision:
        """One order-keyed lookup, then an answer from its facts."""
        order_id, early, prefix = self._order_id(context)
        if order_id is None:
            assert early is not None
            return early
        if not self.has(tool):
            return self.missing_tool(tool)
        found = self.find_ok(tool, order_id=order_id)
        if found is None:
            return self.attempt(
                Call(
                    tool, {"order_id": order_id}, thought.format(oid=order_id), _EXPECTATIONS[tool]
                )
            )
        return Answer(
            text=(prefix + f"{order_id}. " if prefix else "") + answer(order_id, self.facts(found)),
            thought=answered.format(oid=order_id),
        )

    # -- products

    def _product_step(self, target: str, sku_tool: str) -> tuple[str | None, Decision | None]:
        """The SKU for ``target``, or the step that gets it; (None, None) when none exists.

        The product search wants every query word in the name, so a search that finds
        nothing is tried once more without its first word ("blue yoga mat" -> "yoga mat").
        """
        if SKU_EXACT_RE.match(target):
            return target, None
        words = target.split()
        queries = [target, " ".join(words[1:])] if len(words) > 1 else [target]
        for index, query in enumerate(queries):
            found = self.find_ok("search_products", query=query)
            if found is not None:
                sku = pick_sku(found.observation, self.request.text)
                if sku is not None:
                    return sku, None
                continue
            if not self.has("search_products"):
                return None, self.missing_tool("search_products")
            purpose = "price" if sku_tool == "get_sku_price" else "stock"
            thought = (
                f'I need the SKU code of "{target}" before I can check its {purpose}, so I '
                "search the products."
                if index == 0
                else f'The search for "{target}" found no product; I retry with "{query}".'
            )
            call = Call(
                "search_products",
                {"query": query},
                thought,
                _EXPECTATIONS["search_products"],
                sku_tool=sku_tool,
                target=target,
            )
            return None, self.attempt(call)
        return None, None

    def _plan_price(self) -> Decision:
        if not self.has("get_sku_price"):
            return self.missing_tool("get_sku_price")
        targets = self.request.skus or self.request.products
        priced: list[tuple[str, str, Facts]] = []
        missing: list[str] = []
        for target in targets:
            sku, step = self._product_step(target, "get_sku_price")
            if step is not None:
                return step
            if sku is None:
                missing.append(target)
                continue
            found = self.find_ok("get_sku_price", sku=sku)
            if found is None:
                return self.attempt(
                    Call(
                        "get_sku_price",
                        {"sku": sku},
                        f"I have SKU {sku}; I fetch its price and promotions.",
                        _EXPECTATIONS["get_sku_price"],
                    )
                )
            priced.append((target, sku, self.facts(found)))
        comparison: Facts | None = None
        if len(priced) == 2 and self.has("compare_prices"):
            amounts = [_number(_final_price(facts)) for _, _, facts in priced]
            if amounts[0] is not None and amounts[1] is not None:
                args = {"price_a": float(amounts[0]), "price_b": float(amounts[1])}
                found = self.find_ok("compare_prices", **args)
                if found is None:
                    return self.attempt(
                        Call(
                            "compare_prices",
                            args,
                            "I have both final prices; I compare them.",
                            _EXPECTATIONS["compare_prices"],
                        )
                    )
                comparison = Facts(found.observation)
        return Answer(
            text=price_answer(priced, missing, comparison),
            thought="The observations give the prices I need; I answer from them.",
        )

    def _plan_stock(self) -> Decision:
        if not self.has("check_inventory"):
            return self.missing_tool("check_inventory")
        target = (self.request.skus or self.request.products)[0]
        sku, step = self._product_step(target, "check_inventory")
        if step is not None:
            return step
        if sku is None:
            return Answer(
                text=f'I could not find a product matching "{target}".',
                thought=f'The product search found no SKU for "{target}".',
            )
        found = self.find_ok("check_inventory", sku=sku)
        if found is None:
            return self.attempt(
                Call(
                    "check_inventory",
                    {"sku": sku},
                    f"I have SKU {sku}; I check its stock.",
                    _EXPECTATIONS["check_inventory"],
                )
            )
        return Answer(
            text=stock_answer(sku, self.facts(found)),
            thought=f"check_inventory answered for {sku}; I answer from it.",
        )

    # -- policies

    def _plan_policy(self) -> Decision:
        if not self.has("search_articles"):
            return self.missing_tool("search_articles")
        query = article_query(self.request.text)
        found = self.find_ok("search_articles", query=query)
        if found is None:
            return self.attempt(
                Call(
                    "search_articles",
                    {"query": query},
                    f'This is a policy question; I search the help articles for "{query}".',
                    _EXPECTATIONS["search_articles"],
                )
            )
        return Answer(
            text=article_answer(self.facts(found)),
            thought="The article search answered; I quote the top article.",
        )


_EXPECTS_RE = {
    kind: re.compile(rf"expected {kind}|not of type '?{kind}|must be an? {kind}")
    for kind in ("integer", "number")
}


def correct_arguments(call: Call, failed: Round) -> dict[str, Any] | None:
    """Arguments fixed the way the error body asks (an integer, a pattern), if it says."""
    facts = Facts(failed.observation)
    named = facts.get("field", "param", "parameter", "argument")
    if named in call.args:
        fields = [named]
    else:
        # Without a field name, only values the error quotes (or bare digits) are touched.
        fields = [
            name
            for name, value in call.args.items()
            if isinstance(value, str)
            and (
                value.isdigit()
                or f"'{value}'" in failed.observation
                or f'"{value}"' in failed.observation
            )
        ]
    expected = (facts.get("expected_type", "expected") or "").lower()
    text = failed.observation.lower()
    wants_int = expected in ("integer", "int") or bool(_EXPECTS_RE["integer"].search(text))
    wants_number = expected == "number" or bool(_EXPECTS_RE["number"].search(text))
    pattern = facts.get("pattern", "expected_format", "format") or ""
    corrected = dict(call.args)
    for name in fields:
        value = corrected[name]
        if (wants_int or wants_number) and isinstance(value, str):
            digits = re.sub(r"[^\d.]" if wants_number else r"\D", "", value)
            if digits:
                corrected[name] = float(digits) if wants_number else int(digits)
        elif pattern and isinstance(value, str):
            if "#W" in pattern or name == "order_id":
                digits = re.sub(r"\D", "", value)
                corrected[name] = f"#W{digits[-7:]}" if len(digits) >= 7 else value
            elif "sku" in name:
                corrected[name] = re.sub(r"[\s_]+", "-", value.strip()).upper()
    return corrected if corrected != call.args else None


# --- Answers (facts only from observations) ------------------------------------------


def order_answer(order_id: str, facts: Facts) -> str:
    status = facts.get("status", "order_status")
    shipping_status = facts.get("shipping_status")
    carrier = facts.get("carrier")
    tracking = facts.get("tracking_number", "tracking")
    delivered = facts.get("delivered_at", "delivered_on", "delivery_date")
    estimated = facts.get("estimated_delivery", "estimated_delivery_date", "eta")
    parts = []
    if status:
        parts.append(f'Order {order_id} has status "{status}".')
    if shipping_status and shipping_status != status:
        parts.append(f'Its shipping status is "{shipping_status}".')
    if carrier and tracking:
        parts.append(f"It ships with {carrier}, tracking number {tracking}.")
    elif carrier:
        parts.append(f"The carrier is {carrier}.")
    elif tracking:
        parts.append(f"The tracking number is {tracking}.")
    if delivered:
        parts.append(f"It was delivered on {delivered}.")
    elif estimated:
        parts.append(f"Estimated delivery: {estimated}.")
    if not parts:
        return f"I found order {order_id}, but its status was not in the response I received."
    return " ".join(parts)


def return_answer(order_id: str, facts: Facts) -> str:
    eligible = _truthy(facts.get("eligible", "is_eligible", "eligible_for_return", "returnable"))
    deadline = facts.get("return_deadline", "deadline", "return_by", "eligible_until")
    reason = facts.top("reason", "ineligible_reason", "eligibility_reason")
    requests = [
        f"{entry.get('return_id') or entry.get('id')}: {entry['status']}"
        for entry in facts.list_entries()
        if entry.get("status") and (entry.get("return_id") or entry.get("id"))
    ]
    request_status = "; ".join(requests) or facts.get("return_status", "refund_status")
    parts = []
    if eligible is True:
        parts.append(f"Order {order_id} is eligible for a return.")
    elif eligible is False:
        parts.append(f"Order {order_id} is not eligible for a return.")
    if deadline:
        parts.append(f"The return deadline is {deadline}.")
    if reason:
        parts.append(f"Reason: {reason}.")
    if request_status:
        parts.append(f"Existing return requests: {request_status}.")
    if not parts:
        return (
            f"I checked order {order_id}, but the return details were not in the response "
            "I received."
        )
    return " ".join(parts)


def _final_price(facts: Facts) -> str | None:
    return facts.get("final_price") or facts.get("price")


def price_answer(
    priced: list[tuple[str, str, Facts]], missing: list[str], comparison: Facts | None
) -> str:
    parts = []
    for target, sku, facts in priced:
        name = facts.get("product_name", "name") or target
        price, final = facts.get("price"), facts.get("final_price")
        promotions = facts.get("promotions")
        sentence = f"{name} ({sku})"
        if price:
            sentence += f" costs {price}"
            if final and final != price:
                with_promotions = f" with {promotions}" if promotions else ""
                sentence += f";{with_promotions} the final price is {final}"
            elif final:
                sentence += f" (final price {final})"
        elif final:
            sentence += f" has a final price of {final}"
        else:
            sentence += ": the price was not in the response I received"
        parts.append(sentence + ".")
    for target in missing:
        parts.append(f'I could not find a product matching "{target}".')
    if len(priced) == 2:
        names = [facts.get("product_name", "name") or target for target, _, facts in priced]
        cheaper = comparison.get("cheaper") if comparison else None
        difference = comparison.get("difference") if comparison else None
        if cheaper is None:
            amounts = [_number(_final_price(facts)) for _, _, facts in priced]
            if amounts[0] is not None and amounts[1] is not None:
                # No comparison tool: name the cheaper one, but state no number nobody returned.
                cheaper = (
                    "a" if amounts[0] < amounts[1] else "b" if amounts[1] < amounts[0] else "same"
                )
        if cheaper == "same":
            parts.append("Both cost the same.")
        elif cheaper in ("a", "b"):
            winner, other = (names[0], names[1]) if cheaper == "a" else (names[1], names[0])
            parts.append(
                f"{winner} is cheaper than {other}" + (f" by {difference}." if difference else ".")
            )
    if not parts:
        return "I could not find the product you asked about."
    return " ".join(parts)


def _warehouse_counts(facts: Facts) -> list[tuple[str, Any]]:
    """(warehouse, quantity) pairs of a per-warehouse stock list, as the observation gives them."""
    counts: list[tuple[str, Any]] = []
    for entry in facts.list_entries():
        quantity = next(
            (
                entry[key]
                for key in ("available", "quantity", "qty", "on_hand")
                if isinstance(entry.get(key), (int, float)) and not isinstance(entry[key], bool)
            ),
            None,
        )
        if quantity is not None:
            label = next(
                (
                    str(entry[key])
                    for key in ("warehouse", "name", "location", "id")
                    if entry.get(key)
                ),
                f"warehouse {len(counts) + 1}",
            )
            counts.append((label, quantity))
    return counts


def stock_answer(sku: str, facts: Facts) -> str:
    name = facts.get("product_name", "name")
    total = facts.top(
        "total_available", "available_quantity", "quantity_available", "total_quantity"
    ) or facts.top("available", "quantity")
    quantity = _number(total) if total not in ("true", "false") else None
    per_warehouse = _warehouse_counts(facts)
    in_stock = _truthy(facts.get("in_stock"))
    if in_stock is None and quantity is not None:
        in_stock = quantity > 0
    if in_stock is None and per_warehouse:
        in_stock = any(count > 0 for _, count in per_warehouse)
    restock = facts.get("restock_date", "next_restock", "restock_eta", "expected_restock")
    subject = f"{name} ({sku})" if name else sku
    if in_stock is None:
        return f"I checked {subject}, but the stock level was not in the response I received."
    if in_stock:
        if quantity is not None:
            return f"{subject} is in stock: {total} available."
        if per_warehouse:
            listed = "; ".join(f"{label}: {count}" for label, count in per_warehouse)
            return f"{subject} is in stock (available per warehouse: {listed})."
        return f"{subject} is in stock."
    text = f"{subject} is currently out of stock."
    return text + (f" Expected restock date: {restock}." if restock else "")


def article_answer(facts: Facts) -> str:
    title = facts.get("title")
    summary = facts.get("summary", "snippet", "excerpt", "answer", "body", "content")
    if not title and not summary:
        return "I could not find a help article about that."
    if summary and len(summary) > 400:
        summary = summary[:397] + "..."
    if title and summary:
        return f'According to our help article "{title}": {summary}'
    return f'The most relevant help article is "{title}".' if title else str(summary)


# --- Mistakes ------------------------------------------------------------------------


def _made_before(kind: str, prompt: ReasoningPrompt) -> bool:
    """Whether the rounds already show this mistake: the model does not make it twice a run."""
    for rnd in prompt.rounds:
        tool = prompt.tools.get(rnd.action)
        if kind == "name_for_sku":
            sku = rnd.action_input.get("sku")
            if isinstance(sku, str) and not SKU_EXACT_RE.match(sku):
                return True
        if kind == "string_for_int" and tool is not None:
            for name in tool.numeric_params():
                value = rnd.action_input.get(name)
                if isinstance(value, str) and _number(value) is not None:
                    return True
    return False


def _mistake_involves(kind: str, prompt: ReasoningPrompt, decision: Decision) -> list[str] | None:
    """Tool and parameter names the mistake would involve, or None when it cannot apply."""
    last = prompt.rounds[-1] if prompt.rounds else None
    if kind == "skip_tool":
        return [] if isinstance(decision, Call) and not prompt.rounds else None
    if kind == "name_for_sku":
        applies = (
            isinstance(decision, Call)
            and bool(decision.sku_tool)
            and decision.sku_tool in prompt.tools
            and not _made_before(kind, prompt)
        )
        return [decision.sku_tool, "sku"] if applies and isinstance(decision, Call) else None
    if kind == "string_for_int":
        if not isinstance(decision, Call) or _made_before(kind, prompt):
            return None
        tool = prompt.tools.get(decision.tool)
        numeric = [
            name
            for name in (tool.numeric_params() if tool else [])
            if isinstance(decision.args.get(name), (int, float))
            and not isinstance(decision.args.get(name), bool)
        ]
        return [decision.tool, numeric[0]] if numeric else None
    if kind == "repeat_action":
        applies = (
            last is not None
            and last.ok is True
            and last.action in prompt.tools
            and not prompt.warnings
            and not (
                isinstance(decision, Call)
                and decision.tool == last.action
                and decision.args == last.action_input
            )
        )
        return [last.action] if applies and last is not None else None
    if kind == "malformed_json":
        return []
    return None


def _hinted(hints: list[str], kind: str, involved: list[str]) -> bool:
    for hint in hints:
        if _HINT_RE[kind].search(hint):
            return True
        if any(re.search(rf"(?<!\w){re.escape(word)}(?!\w)", hint) for word in involved):
            return True
    return False


def _invented_answer(prompt: ReasoningPrompt, rng: random.Random) -> str:
    """A plausible reply with no tool behind it: the hallucination the runtime must catch."""
    request = understand_request(prompt.request, prompt.customer_id)
    order = request.order_ids[0] if request.order_ids else "order"
    product = (request.products or request.skus or ["item"])[0]
    days = rng.randint(2, 5)
    price = f"${rng.randint(19, 199)}.{rng.choice(['00', '49', '99'])}"
    return {
        "order": f"Your order {order} has shipped and will arrive in {days} days.",
        "return": (
            f"Your order {order} is eligible for a return; you will get a refund within "
            f"{days} business days."
        ),
        "price": f"The price of the {product} is {price} right now.",
        "stock": f"Yes, the {product} is in stock and ships within {days} days.",
        "policy": f"You can return any item within 30 days; refunds take {days} business days.",
    }[request.intent]


def _make_mistake(
    kind: str, prompt: ReasoningPrompt, decision: Decision, rng: random.Random
) -> Decision:
    if kind == "skip_tool":
        return Answer(
            text=_invented_answer(prompt, rng),
            thought="I already know the answer to this.",
        )
    if kind == "name_for_sku" and isinstance(decision, Call):
        return Call(
            decision.sku_tool,
            {"sku": decision.target},
            f'I look up "{decision.target}" directly.',
            _EXPECTATIONS.get(decision.sku_tool, ""),
        )
    if kind == "string_for_int" and isinstance(decision, Call):
        tool = prompt.tools[decision.tool]
        name = next(
            name
            for name in tool.numeric_params()
            if isinstance(decision.args.get(name), (int, float))
        )
        value = decision.args[name]
        text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
        return Call(
            decision.tool, {**decision.args, name: text}, decision.thought, decision.expectation
        )
    if kind == "repeat_action" and prompt.rounds:
        last = prompt.rounds[-1]
        return Call(
            last.action,
            dict(last.action_input),
            f"Let me call {last.action} again to be sure.",
            _EXPECTATIONS.get(last.action, ""),
        )
    return decision


def _step_payload(decision: Decision) -> dict[str, Any]:
    if isinstance(decision, Answer):
        return {
            "thought": decision.thought,
            "action": FINAL_ANSWER,
            "action_input": {},
            "expectation": "",
            "final_answer": decision.text,
        }
    return {
        "thought": decision.thought,
        "action": decision.tool,
        "action_input": decision.args,
        "expectation": decision.expectation or _EXPECTATIONS.get(decision.tool, ""),
    }


def _malformed(payload: dict[str, Any], rng: random.Random) -> str:
    """Broken JSON the way models break it: cut off, or Python-style quotes and a comma."""
    if rng.random() < 0.5:
        text = json.dumps(payload, ensure_ascii=False)
        return text[: max(12, int(len(text) * rng.uniform(0.4, 0.8)))]
    return repr(payload)[:-1] + ", }"


# --- Reflection ----------------------------------------------------------------------


_CAUSES = {
    "RATE_LIMITED": "upstream throttled the call; retrying once should work",
    "INTERNAL_SERVER_ERROR": "upstream failure on the tool's side; retrying once may work",
    "TIMEOUT": "the tool did not answer in time; retrying once may work",
    "SERVICE_UNAVAILABLE": "the tool is temporarily unavailable; retrying once may work",
    "TYPE_MISMATCH": "an argument has the wrong type",
    "INVALID_PARAMETER": "an argument does not have the expected format",
    "MISSING_REQUIRED_FIELD": "a required argument is missing",
    "UNAUTHORIZED": "the tool rejected the credentials",
    "TOOL_NOT_ALLOWED": "the tool is not allowed for this agent",
    "INVALID_ENDPOINT": "the tool's endpoint was refused",
    "MODEL_FORMAT_ERROR": "my previous reply was not valid JSON",
    "LOOP_DETECTED": "the same action was repeated",
    "HALLUCINATED_ANSWER": "the answer cited facts that were not in any observation",
}
_TYPE_BY_CODE = {
    400: "INVALID_PARAMETER",
    401: "UNAUTHORIZED",
    403: "UNAUTHORIZED",
    404: "RESOURCE_NOT_FOUND",
    408: "TIMEOUT",
    422: "INVALID_PARAMETER",
    429: "RATE_LIMITED",
    500: "INTERNAL_SERVER_ERROR",
    502: "INTERNAL_SERVER_ERROR",
    503: "SERVICE_UNAVAILABLE",
    504: "TIMEOUT",
}


def reflect(prompt: ReflectionPrompt) -> dict[str, Any]:
    """Compare the observation with the expectation: met, likely cause, next move."""
    if prompt.ok:
        return {"expectation_met": True, "likely_cause": "", "next": "continue"}
    error_type = prompt.error_type or _TYPE_BY_CODE.get(prompt.status_code or 0, "")
    if not error_type:
        body_type = Facts(prompt.observation).get("error_type", "type", "code", "error") or ""
        error_type = body_type.upper() if re.fullmatch(r"[A-Za-z_]+", body_type) else "ERROR"
    rnd = Round(
        0,
        prompt.action,
        prompt.action_input,
        False,
        prompt.status_code,
        error_type,
        prompt.observation,
    )
    kind = _error_kind(rnd)
    next_move = {"denied": "stop", "transient": "continue"}.get(kind, "switch")
    return {
        "expectation_met": False,
        "likely_cause": f"{error_type}: {_cause(error_type, prompt)}"[:1000],
        "next": next_move,
    }


def _cause(error_type: str, prompt: ReflectionPrompt) -> str:
    if _DENIED_TEXT_RE.search(prompt.observation):
        return "the tool is suspended or not allowed for this agent"
    sku = prompt.action_input.get("sku")
    if (
        isinstance(sku, str)
        and not SKU_EXACT_RE.match(sku)
        and error_type
        in (
            "RESOURCE_NOT_FOUND",
            "INVALID_PARAMETER",
        )
    ):
        return "the sku looks like a product name; search the product to get its SKU code"
    if error_type == "RESOURCE_NOT_FOUND":
        key = next(iter(prompt.action_input), None)
        if key is not None:
            return f"no resource with {key} {prompt.action_input[key]} exists"
        return "the requested resource does not exist"
    cause = _CAUSES.get(error_type, "the tool returned an error")
    facts = Facts(prompt.observation)
    expected = facts.get("expected_type", "pattern")
    field_name = facts.get("field", "param", "parameter")
    if expected and field_name:
        cause += f" ({field_name} expects {expected})"
    elif expected:
        cause += f" (expected {expected})"
    return cause


# --- Self-RAG ------------------------------------------------------------------------

_RAG_SECTION_RE = re.compile(
    r"^## (Question|Retrieved documents|Draft answer|Instructions)[ \t]*$", re.MULTILINE
)
_RAG_DOC_RE = re.compile(r"^### \[([^\]\n]+)\] ?(.*)$", re.MULTILINE)
_RAG_WORD_RE = re.compile(r"[a-z0-9]+(?:[.,'][a-z0-9]+)*")
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_ABSTAIN_RE = re.compile(
    r"\b(i don't know|i do not know|don't have (?:that|this) information|not covered|"
    r"do not cover|don't cover|cannot answer|can't answer)\b",
    re.IGNORECASE,
)
# Words that say what kind of question it is, not what it is about. A question's key
# words are the rest, and a helpful draft must contain every one of them.
_RAG_STOPWORDS = _word_set(
    """a about after again all also am an and any are as at be been before being but by can
    could did do does doing for from get gets got had has have having he her here him his how
    i i'd i'm if in into is it it's its just know let me more most much many my need no not
    of on once one only or our out over please should so some tell than thank thanks that
    the their them then there these they this those to too want was we were what what's when
    where which while who whom why will with would you your yours"""
)
# "How long" asks for a duration; "long" is not a topic the draft must repeat.
_QUESTION_FORM_RE = re.compile(r"\bhow (?:long|many|much|often|soon|far)\b", re.IGNORECASE)
ABSTAIN_ANSWER = "I don't know: the help articles I found do not cover this question."
MAX_DRAFT_SENTENCES = 3
NEAR_VERBATIM_RATIO = 0.85


@dataclass
class RagDoc:
    slug: str
    title: str
    text: str


@dataclass
class RagPrompt:
    question: str
    docs: list[RagDoc]
    draft: str = ""


def parse_rag_prompt(body: str) -> RagPrompt:
    """Read the Question, Retrieved documents and Draft answer sections."""
    matches = list(_RAG_SECTION_RE.finditer(body))
    sections: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(body)
        content = body[match.end() : end].strip("\n")
        sections.setdefault(match.group(1), "" if content.strip() == "- (none)" else content)
    listing = sections.get("Retrieved documents", "")
    headings = list(_RAG_DOC_RE.finditer(listing))
    docs = [
        RagDoc(
            slug=heading.group(1).strip(),
            title=heading.group(2).strip(),
            text=unquoted(
                listing[heading.end() : headings[i + 1].start() if i + 1 < len(headings) else None]
            ),
        )
        for i, heading in enumerate(headings)
    ]
    return RagPrompt(
        question=unquoted(sections.get("Question", "")),
        docs=docs,
        draft=unquoted(sections.get("Draft answer", "")),
    )


def _fold(word: str) -> str:
    """A crude stemmer, enough for "returned" to meet "return" and "items" "item"."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith(("ed", "es")):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def _rag_words(text: str) -> list[str]:
    return _RAG_WORD_RE.findall(text.lower())


def key_terms(text: str) -> dict[str, str]:
    """The content words of ``text``: folded form -> the first word that folded to it."""
    terms: dict[str, str] = {}
    for word in _rag_words(text):
        if word not in _RAG_STOPWORDS and len(word) > 1:
            terms.setdefault(_fold(word), word)
    return terms


def question_key_terms(question: str) -> dict[str, str]:
    """The key terms of a question, without its question form ("how long", ...)."""
    return key_terms(_QUESTION_FORM_RE.sub(" ", question))


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_SPLIT_RE.split(" ".join(text.split())) if part]


def rag_draft(prompt: RagPrompt) -> dict[str, Any]:
    """Quote the document sentences that share the most key words with the question,
    greedily covering as many of its key words as possible; abstain when none shares one."""
    wanted = set(question_key_terms(prompt.question))
    candidates = [
        (doc_index, position, sentence, set(key_terms(sentence)) & wanted)
        for doc_index, doc in enumerate(prompt.docs)
        for position, sentence in enumerate(_sentences(doc.text))
    ]
    covered: set[str] = set()
    chosen: list[tuple[int, int, str]] = []
    while len(chosen) < MAX_DRAFT_SENTENCES:
        best = max(
            (c for c in candidates if c[3] - covered),
            key=lambda c: (len(c[3] - covered), -c[0], -c[1]),
            default=None,
        )
        if best is None:
            break
        chosen.append((best[0], best[1], best[2]))
        covered |= best[3]
        candidates.remove(best)
    if not chosen:
        return {"answer": ABSTAIN_ANSWER, "cited_slugs": []}
    chosen.sort()
    slugs = _unique([prompt.docs[doc_index].slug for doc_index, _, _ in chosen])
    return {"answer": " ".join(sentence for _, _, sentence in chosen), "cited_slugs": slugs}


def _sentence_supported(sentence: str, doc_sentences: list[list[str]], evidence: str) -> bool:
    """Near-verbatim: the sentence's words match one document sentence closely, and every
    number it states appears in the documents."""
    words = _rag_words(sentence)
    if not words:
        return True
    if any(ch.isdigit() for ch in sentence):
        numbers = re.findall(r"\d+(?:[.,]\d+)*", sentence)
        if any(number not in evidence for number in numbers):
            return False
    return any(
        difflib.SequenceMatcher(None, words, candidate, autojunk=False).ratio()
        >= NEAR_VERBATIM_RATIO
        for candidate in doc_sentences
    )


def rag_grade(prompt: RagPrompt) -> dict[str, Any]:
    """A strict check: grounded when every draft sentence is near-verbatim in the
    documents, helpful when the draft contains every key word of the question."""
    evidence = " ".join(doc.text for doc in prompt.docs)
    doc_sentences = [_rag_words(s) for doc in prompt.docs for s in _sentences(doc.text)]
    abstains = bool(_ABSTAIN_RE.search(prompt.draft))
    # An abstention states nothing the documents could contradict.
    unsupported = (
        []
        if abstains
        else [
            s
            for s in _sentences(prompt.draft)
            if not _sentence_supported(s, doc_sentences, evidence)
        ]
    )
    wanted = question_key_terms(prompt.question)
    draft_terms = key_terms(prompt.draft)
    missing = [word for term, word in wanted.items() if abstains or term not in draft_terms]
    grounded = bool(prompt.draft) and not unsupported
    helpful = bool(prompt.draft) and not abstains and not missing
    critique: list[str] = []
    if unsupported:
        quoted = "; ".join(f'"{s[:120]}"' for s in unsupported[:3])
        critique.append(f"Not supported by the documents: {quoted}.")
    if abstains:
        critique.append("The draft does not answer the question.")
    if missing:
        critique.append(f"The question asks about {', '.join(missing)}, which the draft lacks.")
    if not prompt.docs:
        critique.append("No documents were retrieved.")
    improved = None
    if not helpful:
        improved = " ".join(_unique([*missing, *wanted.values()])) or None
    return {
        "is_grounded": grounded,
        "is_helpful": helpful,
        "critique": " ".join(critique) or "The draft is supported and answers the question.",
        "improved_search_query": improved,
    }
