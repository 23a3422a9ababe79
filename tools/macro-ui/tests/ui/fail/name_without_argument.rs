use leader::leader_election;

#[leader_election(name = "report-{tenant}")]
async fn report(customer: &str) -> String {
    customer.to_owned()
}

fn main() {}
