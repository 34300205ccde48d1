import cw_middleware as cw


def test_untagged_request_gets_full_breakdown(runtime):
    snap = cw.estimate(model="gpt-4o", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert snap.tokens("system_prompt") > 0
    assert snap.tokens("conversation") > 0
    assert sum(b.tokens for b in snap.breakdown) == snap.input_tokens
