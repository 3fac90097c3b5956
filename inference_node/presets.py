"""Vendor presets: what a new channel of a known vendor starts from.

A preset fills the defaults of a new node (kind, base URL, API path, health
check) and the "Add node" form shows its quirks and example model mappings;
nothing else reads it, so a channel keeps working if its preset is renamed or
removed (``Node.preset`` is only a label). The example models are suggestions
(public name → the vendor's id, context window, modality "text" or "vision" as
the model catalogue spells them), not a price list: the operator maps what
they sell.

Decisions:

* ``api_path`` is where the vendor's API starts. Empty means the kind's usual
  prefix (``/v1``, ``/v1beta`` for Gemini); presets spell it out so the form
  shows it.
* Vendors default to the ``models`` health check (a light GET of the model
  list with the channel's first active key); the operator may choose
  ``traffic`` (no probe at all). Only self-hosted servers have ``/health``.
  The Anthropic-protocol endpoints of Kimi, GLM, DeepSeek and Qwen (the ones
  their vendors document for Claude Code) document ``POST .../v1/messages``
  and no model list, so their presets start on ``traffic``: a probe of an
  undocumented list would take a working channel down.
* Those endpoints' base URLs (``https://api.moonshot.cn/anthropic`` and so
  on) are split as the other presets are: the host is the base URL and the
  path, ending in the ``/v1`` the Anthropic SDKs append, is ``api_path``.
* Base URLs are the vendors' documented public endpoints; no test ever
  connects to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from inference_node.models import HealthCheck, NodeKind

# Where a kind's API starts when a node gives no api_path.
DEFAULT_API_PATH: dict[str, str] = {
    NodeKind.OPENAI_COMPATIBLE: "/v1",
    NodeKind.OPENAI: "/v1",
    NodeKind.ANTHROPIC: "/v1",
    NodeKind.GEMINI: "/v1beta",
}
ANTHROPIC_VERSION = "2023-06-01"


def api_prefix(kind: str, api_path: str) -> str:
    """The path every API call of this node starts with (no trailing slash)."""
    return (api_path or DEFAULT_API_PATH.get(kind, "/v1")).rstrip("/")


@dataclass(frozen=True)
class ExampleModel:
    public_name: str
    vendor_id: str
    context_window: int | None = None
    modality: str = "text"  # "text" or "vision" (usage.models.Modality)

    @property
    def line(self) -> str:
        """As a line of the form's models field."""
        mapping = (
            self.public_name
            if self.public_name == self.vendor_id
            else f"{self.public_name}={self.vendor_id}"
        )
        return f"{mapping}:{self.context_window}" if self.context_window else mapping


@dataclass(frozen=True)
class Preset:
    key: str
    label: str  # may be lazy (translated when shown)
    kind: str
    base_url: str
    api_path: str
    health_check: str
    models: tuple[ExampleModel, ...]
    quirks: str  # lazy: translated when shown

    @property
    def is_vendor(self) -> bool:
        return self.health_check != HealthCheck.HEALTH

    @property
    def models_text(self) -> str:
        return "\n".join(m.line for m in self.models)


_VISION = "vision"

PRESETS: dict[str, Preset] = {
    p.key: p
    for p in (
        Preset(
            key="openai",
            label="OpenAI",
            kind=NodeKind.OPENAI,
            base_url="https://api.openai.com",
            api_path="/v1",
            health_check=HealthCheck.MODELS,
            models=(
                ExampleModel("gpt-4.1", "gpt-4.1", 1_047_576, _VISION),
                ExampleModel("gpt-4o-mini", "gpt-4o-mini", 128_000, _VISION),
                ExampleModel("text-embedding-3-small", "text-embedding-3-small", 8_191),
            ),
            quirks=_(
                "Authorization: Bearer <key>. Cached prompt tokens are reported in "
                "usage.prompt_tokens_details.cached_tokens; reasoning tokens count as output."
            ),
        ),
        Preset(
            key="anthropic",
            label="Anthropic",
            kind=NodeKind.ANTHROPIC,
            base_url="https://api.anthropic.com",
            api_path="/v1",
            health_check=HealthCheck.MODELS,
            models=(
                ExampleModel("claude-sonnet-4", "claude-sonnet-4-20250514", 200_000, _VISION),
                ExampleModel("claude-opus-4", "claude-opus-4-20250514", 200_000, _VISION),
                ExampleModel("claude-3-5-haiku", "claude-3-5-haiku-20241022", 200_000, _VISION),
            ),
            quirks=format_lazy(
                _(
                    "x-api-key: <key> and anthropic-version: {version} (a client's own "
                    "anthropic-version wins); anthropic-beta headers are passed through. Cache "
                    "reads and writes are usage.cache_read_input_tokens and "
                    "cache_creation_input_tokens, outside input_tokens."
                ),
                version=ANTHROPIC_VERSION,
            ),
        ),
        Preset(
            key="gemini",
            label=_("Google Gemini"),
            kind=NodeKind.GEMINI,
            base_url="https://generativelanguage.googleapis.com",
            api_path="/v1beta",
            health_check=HealthCheck.MODELS,
            models=(
                ExampleModel("gemini-2.5-pro", "gemini-2.5-pro", 1_048_576, _VISION),
                ExampleModel("gemini-2.5-flash", "gemini-2.5-flash", 1_048_576, _VISION),
            ),
            quirks=_(
                "x-goog-api-key: <key> (never ?key= in the URL). Cached tokens are "
                "usageMetadata.cachedContentTokenCount, included in promptTokenCount; "
                "thoughts count as output."
            ),
        ),
        Preset(
            key="deepseek",
            label="DeepSeek",
            kind=NodeKind.OPENAI_COMPATIBLE,
            base_url="https://api.deepseek.com",
            api_path="/v1",
            health_check=HealthCheck.MODELS,
            models=(
                ExampleModel("deepseek-chat", "deepseek-chat", 128_000),
                ExampleModel("deepseek-reasoner", "deepseek-reasoner", 128_000),
            ),
            quirks=_(
                "OpenAI chat with a Bearer key. Cached tokens are reported as "
                "usage.prompt_cache_hit_tokens / prompt_cache_miss_tokens, not "
                "prompt_tokens_details; deepseek-reasoner answers with reasoning_content."
            ),
        ),
        Preset(
            key="moonshot",
            label=_("Moonshot Kimi"),
            kind=NodeKind.OPENAI_COMPATIBLE,
            base_url="https://api.moonshot.cn",
            api_path="/v1",
            health_check=HealthCheck.MODELS,
            models=(
                ExampleModel("kimi-k2", "kimi-k2-0711-preview", 131_072),
                ExampleModel("moonshot-v1-32k", "moonshot-v1-32k", 32_768),
            ),
            quirks=_(
                "OpenAI chat with a Bearer key. Cached tokens are reported as "
                "usage.cached_tokens. Accounts outside mainland China use "
                "https://api.moonshot.ai."
            ),
        ),
        Preset(
            key="zhipu",
            label=_("Zhipu GLM"),
            kind=NodeKind.OPENAI_COMPATIBLE,
            base_url="https://open.bigmodel.cn",
            api_path="/api/paas/v4",
            health_check=HealthCheck.MODELS,
            models=(
                ExampleModel("glm-4.5", "glm-4.5", 131_072),
                ExampleModel("glm-4-flash", "glm-4-flash", 131_072),
            ),
            quirks=_(
                "OpenAI chat under /api/paas/v4 (not /v1), Bearer key. Cached tokens are "
                "usage.prompt_tokens_details.cached_tokens. If the model list answers 404 "
                "for your account, judge the channel by traffic."
            ),
        ),
        Preset(
            key="qwen",
            label=_("Alibaba Qwen (DashScope)"),
            kind=NodeKind.OPENAI_COMPATIBLE,
            base_url="https://dashscope.aliyuncs.com",
            api_path="/compatible-mode/v1",
            health_check=HealthCheck.MODELS,
            models=(
                ExampleModel("qwen-plus", "qwen-plus", 131_072),
                ExampleModel("qwen-max", "qwen-max", 32_768),
                ExampleModel("qwen-vl-plus", "qwen-vl-plus", 131_072, _VISION),
            ),
            quirks=_(
                "OpenAI chat under /compatible-mode/v1, Bearer key. Cached tokens are "
                "usage.prompt_tokens_details.cached_tokens. International accounts use "
                "https://dashscope-intl.aliyuncs.com."
            ),
        ),
        Preset(
            key="moonshot-anthropic",
            label=format_lazy(_("{vendor} (Anthropic protocol)"), vendor=_("Moonshot Kimi")),
            kind=NodeKind.ANTHROPIC,
            base_url="https://api.moonshot.cn",
            api_path="/anthropic/v1",
            health_check=HealthCheck.TRAFFIC,
            models=(
                ExampleModel("kimi-k2.6", "kimi-k2.6", 262_144),
                ExampleModel("kimi-k2.5", "kimi-k2.5", 262_144, _VISION),
                ExampleModel("kimi-k2-turbo-preview", "kimi-k2-turbo-preview", 262_144),
            ),
            quirks=_(
                "Anthropic Messages under /anthropic/v1 (what Claude Code calls "
                "https://api.moonshot.cn/anthropic), the key as x-api-key. Cache reads are "
                "usage.cache_read_input_tokens (repeated as cached_tokens); in a stream "
                "message_start may count the whole prompt as input_tokens and message_delta "
                "carries the cached split. No model list is documented here: judged by "
                "traffic. Accounts outside mainland China use https://api.moonshot.ai."
            ),
        ),
        Preset(
            key="zhipu-anthropic",
            label=format_lazy(_("{vendor} (Anthropic protocol)"), vendor=_("Zhipu GLM")),
            kind=NodeKind.ANTHROPIC,
            base_url="https://open.bigmodel.cn",
            api_path="/api/anthropic/v1",
            health_check=HealthCheck.TRAFFIC,
            models=(
                ExampleModel("glm-4.7", "glm-4.7", 200_000),
                ExampleModel("glm-4.5-air", "glm-4.5-air", 128_000),
                ExampleModel("glm-4.5-flash", "glm-4.5-flash", 128_000),
            ),
            quirks=_(
                "Anthropic Messages under /api/anthropic/v1 (what Claude Code calls "
                "https://open.bigmodel.cn/api/anthropic), the key as x-api-key. Cache reads, "
                "when reported, are usage.cache_read_input_tokens; send cache_control to get "
                "them. No model list is documented here: judged by traffic. International "
                "(Z.ai) accounts use https://api.z.ai."
            ),
        ),
        Preset(
            key="deepseek-anthropic",
            label=format_lazy(_("{vendor} (Anthropic protocol)"), vendor="DeepSeek"),
            kind=NodeKind.ANTHROPIC,
            base_url="https://api.deepseek.com",
            api_path="/anthropic/v1",
            health_check=HealthCheck.TRAFFIC,
            models=(
                ExampleModel("deepseek-v4-pro", "deepseek-v4-pro", 1_000_000),
                ExampleModel("deepseek-v4-flash", "deepseek-v4-flash", 1_000_000),
            ),
            quirks=_(
                "Anthropic Messages under /anthropic/v1 (what Claude Code calls "
                "https://api.deepseek.com/anthropic), the key as x-api-key. Its automatic "
                "disk cache reports hits as usage.cache_read_input_tokens, outside "
                "input_tokens; cache_control is ignored, so there are no cache writes. "
                "Ignored too: anthropic-beta, anthropic-version, top_k, container, "
                "mcp_servers, service_tier, thinking.budget_tokens and metadata other than "
                "user_id. Claude model names are mapped to DeepSeek's own (claude-opus* to "
                "deepseek-v4-pro): map public names explicitly. No model list is documented "
                "here: judged by traffic."
            ),
        ),
        Preset(
            key="dashscope-anthropic",
            label=_("Alibaba Qwen (DashScope, Anthropic protocol)"),
            kind=NodeKind.ANTHROPIC,
            base_url="https://dashscope.aliyuncs.com",
            api_path="/apps/anthropic/v1",
            health_check=HealthCheck.TRAFFIC,
            models=(
                ExampleModel("qwen3-coder-plus", "qwen3-coder-plus", 1_000_000),
                ExampleModel("qwen3-max", "qwen3-max", 262_144),
                ExampleModel("qwen-flash", "qwen-flash", 1_000_000),
            ),
            quirks=_(
                "Anthropic Messages under /apps/anthropic/v1 (what Claude Code calls "
                "https://dashscope.aliyuncs.com/apps/anthropic), Beijing-region keys as "
                "x-api-key; Singapore keys use https://dashscope-intl.aliyuncs.com and Coding "
                "Plan keys their own base URL. Cache reads are usage.cache_read_input_tokens; "
                "cache_control makes an explicit cache whose writes are "
                "cache_creation_input_tokens (dearer than input). In a stream message_start "
                "counts the whole prompt as input_tokens and message_delta carries the cached "
                "split. No model list is documented here: judged by traffic."
            ),
        ),
        Preset(
            key="openrouter",
            label="OpenRouter",
            kind=NodeKind.OPENAI_COMPATIBLE,
            base_url="https://openrouter.ai",
            api_path="/api/v1",
            health_check=HealthCheck.MODELS,
            models=(
                ExampleModel("gpt-4o", "openai/gpt-4o", 128_000, _VISION),
                ExampleModel("claude-sonnet-4", "anthropic/claude-sonnet-4", 200_000, _VISION),
            ),
            quirks=_(
                "OpenAI chat under /api/v1, Bearer key; model ids are vendor/model. Cached "
                "tokens are usage.prompt_tokens_details.cached_tokens."
            ),
        ),
        Preset(
            key="self_hosted",
            label=_("Self-hosted (vLLM, SGLang, llama.cpp)"),
            kind=NodeKind.OPENAI_COMPATIBLE,
            base_url="",
            api_path="",
            health_check=HealthCheck.HEALTH,
            models=(ExampleModel("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 131_072),),
            quirks=_(
                "Probed at /health, /v1/models and /metrics every few seconds. Give the "
                "server's root without /v1; the optional token is sent as a Bearer token."
            ),
        ),
    )
}


def get_preset(key: str | None) -> Preset | None:
    return PRESETS.get(key or "")


def preset_choices() -> list[tuple[str, str]]:
    return [(p.key, p.label) for p in PRESETS.values()]
