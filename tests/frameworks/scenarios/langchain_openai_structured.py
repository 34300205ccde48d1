"""LangChain's ChatOpenAI.with_structured_output (json_schema, the lookup tool bound beside it): the official openai
client's ``chat.completions.parse`` through ``with_raw_response``, or ``beta.chat.completions.stream`` when streamed."""

from __future__ import annotations

from _scenario import Scenario, main
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel


class Answer(BaseModel):
    answer: str


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    tool = StructuredTool.from_function(lookup, name="lookup", description=scenario.tool_description)
    llm = ChatOpenAI(model="gpt-4o", base_url=scenario.base_url, api_key="sk-local", streaming=scenario.stream, max_retries=0)
    structured = llm.with_structured_output(Answer, method="json_schema", tools=[tool], strict=True, include_raw=True)
    messages = [SystemMessage(scenario.system_prompt), HumanMessage(scenario.task)]
    for _ in range(4):
        out = structured.invoke(messages)
        if out.get("parsing_error"):
            raise out["parsing_error"]
        reply = out["raw"]
        messages.append(reply)
        if not reply.tool_calls:
            return out["parsed"].answer
        for call in reply.tool_calls:
            messages.append(ToolMessage(tool.invoke(call["args"]), tool_call_id=call["id"]))
    raise RuntimeError("no final answer")


if __name__ == "__main__":
    main(run, packages=("langchain-openai", "langchain-core", "openai"))
