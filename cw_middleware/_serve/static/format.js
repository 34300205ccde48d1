/* Numbers as `cw-middleware show` prints them (cw_middleware/_cli/render.py, format_tokens / format_percent):
   below 10,000 with thousands separators, then 12.3k, then 1.2M; one decimal everywhere.
   Python rounds an exact tie (10250 -> 10.25) half to even, JavaScript's toFixed half up: fixed1
   does what Python does, so the page and the terminal never disagree by a digit. */
(function (global) {
  "use strict";

  function fixed1(x) {
    var a = Math.abs(x);
    // x sits exactly halfway between two tenths only when 4x is an odd integer (x = odd/4).
    if (isFinite(a) && a < 1e15 && (a * 4) % 2 === 1) {
      var k = Math.floor(a * 10);
      var even = k % 2 === 0 ? k : k + 1;
      return (x < 0 ? "-" : "") + (even / 10).toFixed(1);
    }
    return x.toFixed(1);
  }

  function tokens(n) {
    if (n >= 1000000) return fixed1(n / 1000000) + "M";
    if (n >= 10000) return fixed1(n / 1000) + "k";
    return Math.round(n).toLocaleString("en-US");
  }

  function percent(part, whole) {
    return fixed1((100 * part) / whole) + "%";
  }

  // US dollars as format_usd writes them: cents from a dollar up, four decimals below, six below a hundredth of a cent.
  function usd(value) {
    if (value === null || value === undefined) return "-";
    if (value >= 1) return "$" + value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
    return "$" + value.toFixed(value >= 0.0001 || value === 0 ? 4 : 6);
  }

  global.cwFormat = { tokens: tokens, percent: percent, fixed1: fixed1, usd: usd };
})(window);
