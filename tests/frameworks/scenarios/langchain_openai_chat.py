"""LangChain's ChatOpenAI (langchain-openai, the official openai client, no LiteLLM): one tool round, then the answer."""

from __future__ import annotations

from _scenario import Scenario, main
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    tool = StructuredTool.from_function(lookup, name="lookup", description=scenario.tool_description)
    llm = ChatOpenAI(
        model="gpt-4o", base_url=scenario.base_url, api_key="sk-local", streaming=scenario.stream, max_retries=0
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
            return str(reply.content)
        for call in reply.tool_calls:
            messages.append(ToolMessage(tool.invoke(call["args"]), tool_call_id=call["id"]))
    raise RuntimeError("no final answer")


if __name__ == "__main__":
    main(run, packages=("langchain-openai", "langchain-core", "openai"))
