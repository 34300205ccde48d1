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

  // US dollars as format_usd writes them: cents from a dollar up, four decimals below, two significant digits
  // below a hundredth of a cent (a cost is never written as zeros), and "$0" for nothing at all.
  function usd(value) {
    if (value === null || value === undefined) return "-";
    if (value === 0) return "$0";
    if (value >= 1) return "$" + value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
    if (value >= 0.0001) return "$" + value.toFixed(4);
    return "$" + value.toFixed(1 - Math.floor(Math.log10(value))); // two significant digits: never written as zeros
  }

  // A number as Python's "{:g}" writes the usual ones (80.0 -> 80, 92.5 -> 92.5): six significant digits, no zeros.
  function general(x) {
    return String(Number(Number(x).toPrecision(6)));
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // A time from the API (ISO 8601) in this browser's local time, to the second, with its zone as an explicit
  // offset: "2026-12-06 13:34:12 UTC+05:30" ("UTC" itself when the offset is zero). null for no time.
  function time(iso) {
    if (!iso) return null;
    var d = new Date(iso);
    if (isNaN(d.getTime())) return String(iso);
    var offset = -d.getTimezoneOffset();
    var a = Math.abs(offset);
    var zone = offset === 0 ? "UTC" : "UTC" + (offset > 0 ? "+" : "-") + pad(Math.floor(a / 60)) + ":" + pad(a % 60);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + " " + zone;
  }

  global.cwFormat = { tokens: tokens, percent: percent, fixed1: fixed1, usd: usd, general: general, time: time };
})(window);
