"""The whole migration: swap the import. No API key needed (mock_response).

python examples/plain_wrap.py
"""

import cw_middleware as cw

cw.configure(export="none")  # keep this example's telemetry to itself

messages = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
response = cw.completion(model="gpt-4o", messages=messages, mock_response="Paris.")  # was: litellm.completion
print("reply:", response.choices[0].message.content)

snapshot = cw.snapshots()[-1]
print(f"input tokens: {snapshot.input_tokens} of {snapshot.context_window_tokens} ({snapshot.count_method.value})")
for item in snapshot.breakdown:
    if item.tokens:
        print(f"  {item.category.value:<14} {item.tokens:>6}")
