//! `strftime_now(fmt)`: transformers' `datetime.now().strftime(fmt)`, in UTC (no time
//! zone database here) and for the common C conversions; others pass through verbatim.

use std::fmt::Write;

const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

pub(super) fn now(fmt: &str) -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    format_utc(fmt, secs)
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01 (Howard Hinnant's
/// civil-from-days).
fn civil(days: i64) -> (i64, usize, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month as usize, day)
}

/// Format `secs` since the epoch (UTC) with C `strftime` conversions, including glibc's
/// `%-d` (no padding).
pub(super) fn format_utc(fmt: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (year, month, day) = civil(days);
    let (hour, minute, second) = (tod / 3600, tod / 60 % 60, tod % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let yday = days - civil_days_before_year(year) + 1;
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let (pad, conv) = match chars.next() {
            Some('-') => (false, chars.next()),
            other => (true, other),
        };
        let num = |out: &mut String, v: i64, width: usize| {
            let _ = if pad { write!(out, "{v:0width$}") } else { write!(out, "{v}") };
        };
        match conv {
            Some('Y') => num(&mut out, year, 4),
            Some('y') => num(&mut out, year.rem_euclid(100), 2),
            Some('m') => num(&mut out, month as i64, 2),
            Some('d') => num(&mut out, day, 2),
            Some('e') => {
                let _ = write!(out, "{day:>2}");
            }
            Some('j') => num(&mut out, yday, 3),
            Some('H') => num(&mut out, hour, 2),
            Some('I') => num(&mut out, hour12, 2),
            Some('M') => num(&mut out, minute, 2),
            Some('S') => num(&mut out, second, 2),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('B') => out.push_str(MONTHS[month - 1]),
            Some('b') | Some('h') => out.push_str(&MONTHS[month - 1][..3]),
            Some('F') => {
                let _ = write!(out, "{year:04}-{month:02}-{day:02}");
            }
            Some('T') => {
                let _ = write!(out, "{hour:02}:{minute:02}:{second:02}");
            }
            Some('Z') => out.push_str("UTC"),
            Some('z') => out.push_str("+0000"),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if !pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days from 1970-01-01 to January 1st of `year`.
fn civil_days_before_year(year: i64) -> i64 {
    let y = year - 1;
    let leaps = |y: i64| y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400);
    365 * (year - 1970) + leaps(y) - leaps(1969)
}

#[cfg(test)]
mod tests {
    use super::format_utc;

    #[test]
    fn formats_known_instants() {
        // 2024-02-29 13:05:09 UTC, a Thursday, day 60 of a leap year.
        let t = 1_709_211_909;
        assert_eq!(format_utc("%Y-%m-%d %H:%M:%S", t), "2024-02-29 13:05:09");
        assert_eq!(format_utc("%d %b %Y", t), "29 Feb 2024");
        assert_eq!(format_utc("%A %B %-d, %I %p, day %j", t), "Thursday February 29, 01 PM, day 060");
        assert_eq!(format_utc("%a %y %e %% %Q", 0), "Thu 70  1 % %Q");
    }
}
