"""LangChain's ChatGoogleGenerativeAI (langchain-google-genai, the official google-genai client, no LiteLLM):
``client.models.generate_content[_stream]``, one tool round, then the answer."""

from __future__ import annotations

from _scenario import Scenario, main
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_google_genai import ChatGoogleGenerativeAI


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    tool = StructuredTool.from_function(lookup, name="lookup", description=scenario.tool_description)
    llm = ChatGoogleGenerativeAI(
        model="gemini-2.5-flash",
        google_api_key="gm-local",
        base_url=scenario.base_url.removesuffix("/v1"),
        max_retries=1,
    ).bind_tools([tool])
    messages = [SystemMessage(scenario.system_prompt), HumanMessage(scenario.task)]
    for _ in range(4):
        if scenario.stream:
            reply = None
            for chunk in llm.stream(messages):
                reply = chunk if reply is None else reply + chunk
        else:
            reply = llm.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return reply.text if isinstance(reply.content, list) else str(reply.content)
        for call in reply.tool_calls:
            messages.append(ToolMessage(tool.invoke(call["args"]), tool_call_id=call["id"]))
    raise RuntimeError("no final answer")


if __name__ == "__main__":
    main(run, packages=("langchain-google-genai", "langchain-core", "google-genai"))
