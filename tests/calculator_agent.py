"""An openai-agents SDK agent with one function tool, run through a router: the Responses route's
tests ask it of native and translated members alike."""

from __future__ import annotations

import agents
import openai

from asgi_router.testing import FakeUpstream, reply


def script_tool_round_trip(upstream: FakeUpstream, model_id: str) -> None:
    """``model_id`` first calls ``add(2, 3)``, then answers with the sum."""
    upstream.script(model_id, reply.tool_call("add", {"a": 2, "b": 3}), reply.ok("2 + 3 = 5"))


async def run_calculator_agent(base_url: str, ref: str) -> tuple[str, list[tuple[int, int]]]:
    """Run the agent on ``ref`` against the router at ``base_url``: its final output and the
    arguments its tool was called with."""
    added: list[tuple[int, int]] = []

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        added.append((a, b))
        return a + b

    agents.set_tracing_disabled(True)
    async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="client-key", max_retries=0) as client:
        model = agents.OpenAIResponsesModel(model=ref, openai_client=client)
        agent = agents.Agent(name="calculator", instructions="Use the tool.", tools=[add], model=model)
        result = await agents.Runner.run(agent, "what is 2 + 3?")
    return result.final_output, added
